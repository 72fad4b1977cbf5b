"""``sdr mlt``: the query from the flags (the same :class:`~sdr_search.reranker.query.Query` the HTTP
body builds), one run of the engine, and the text it prints (:func:`format_result`, with the
``--explain`` legend) or the HTTP response body (``--json``)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from sdr_search.core.errors import InputReadError, InvalidInputError
from sdr_search.core.fusion import format_weights

from .args import encoder_for_store, fusion_args, index_name, open_store

logger = logging.getLogger("sdr")

__all__ = ["cmd_mlt", "record_from_file", "source_args", "filter_arg", "format_result", "EXPLAIN_LEGEND"]


def record_from_file(path: Path) -> dict:
    """A source document from a file: ``.txt`` is raw text; ``.json``/``.jsonl`` the first record."""
    if path.is_dir():
        raise InputReadError(f"source file {path} is a directory; give a .txt, .json or .jsonl file")
    if not path.is_file():
        raise InputReadError(f"source file {path} does not exist")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputReadError(f"cannot read source file {path}: {e.strerror or e}") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"{path}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})") from e
    if path.suffix in (".json", ".jsonl"):
        line = text.strip().splitlines()[0] if text.strip() else ""
        try:
            record = json.loads(text if path.suffix == ".json" else line)
        except json.JSONDecodeError as e:
            raise InvalidInputError(f"{path}: invalid JSON ({e.msg})") from e
        if not isinstance(record, dict):
            raise InvalidInputError(f"{path}: expected a JSON object")
        return {k: v for k, v in record.items() if k in ("text", "paragraphs", "sections", "title")}
    return {"text": text}


def source_args(args) -> dict:
    """The query's sources from ``sdr mlt``'s arguments: one of --id/--file/--text, or --like and
    --like-file; --unlike/--unlike-file; --unlike-weight."""
    single = [n for n in ("id", "file", "text") if getattr(args, n, None) is not None]
    likes = [*(args.like or ()), *(record_from_file(p) for p in args.like_file or ())]
    unlikes = [*(args.unlike or ()), *(record_from_file(p) for p in args.unlike_file or ())]
    if single and likes:
        raise InvalidInputError(f"give --{single[0]} or --like/--like-file, not both")
    if not single and not likes:
        raise InvalidInputError("give a source: --id, --file or --text, or several with --like / --like-file")
    if args.id is not None:
        source: dict = {"id": args.id}
    elif args.text is not None:
        source = {"text": args.text}
    elif args.file is not None:
        source = record_from_file(args.file)
    else:
        source = {"like": likes}
    if unlikes:
        source["unlike"] = unlikes
    if args.unlike_weight is not None:
        source["unlike_weight"] = args.unlike_weight
    return source


def filter_arg(text: str | None) -> dict | None:
    """``--filter JSON``: a metadata equality filter object (validated by the engine's query)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidInputError(f"--filter: invalid JSON ({e.msg}); e.g. --filter '{{\"court\": \"supreme\"}}'") from e
    if not isinstance(value, dict):
        raise InvalidInputError(f"--filter: expected a JSON object {{field: value}}, got {type(value).__name__}")
    return value


def cmd_mlt(args) -> int:
    from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query

    settings = MLTSettings()
    given = dict(size=args.size, offset=args.offset, candidates=args.candidates, filter=filter_arg(args.filter),
                 explain=args.explain)  # flags left out are absent, as fields left out of an HTTP body
    query = Query(**source_args(args), **{k: v for k, v in given.items() if v is not None}, **fusion_args(args))
    with open_store(args) as store:
        encoder = encoder_for_store(args, store) if query.needs_encoder else None
        result = MoreLikeThis(store=store, encoder=encoder, settings=settings).run(query)
    if args.json:
        from sdr_search.reranker.service.api_models import response_from  # the HTTP schema (pydantic models): only for --json

        body = response_from(result, index_name(args)).model_dump(mode="json", exclude_none=True, by_alias=True)
        sys.stdout.write(json.dumps(body) + "\n")
        return 0
    sys.stdout.write(format_result(result, explain=args.explain) + "\n")
    return 0


EXPLAIN_LEGEND = (
    "How to read this: score ranks the hits; with --method sdr it is S(s, c), the mean over the source's "
    "paragraphs of each one's best normalised score against the hit, with hybrid the fused score. A signal line "
    "(hybrid) gives each signal as raw -> normalised xweight: bm25 is the BM25 score of the whole source text "
    "against the hit, sdr (the signal) is S(s, c), mean is the cosine of the two documents' mean sentence vectors; each is "
    "normalised over this query's candidates (zscore: standard deviations from their mean; minmax: 0 to 1; rrf: "
    "1 / (rank constant + rank); adaptive: as zscore, with the SDR signal lowered by c sqrt(2 ln N) first, N "
    "the hit's paragraphs, c = 0.375) and the score is the weighted mean of the normalised values (rrf: their weighted "
    "sum). paragraph i ~ j: the hit's paragraph j is the best match of source paragraph i (positions from 0); raw "
    "is P_ij, the mean over the sentences of i of each one's best cosine with a sentence of j; normalised is N_ij "
    "= (P_ij - mu_i) / sigma_i, how many standard deviations P_ij lies above what paragraph i typically scores "
    "against the corpus (mu_i, sigma_i: its normalisation statistics); S(s, c) is the mean of the best N_ij of "
    "every source paragraph (the three highest are shown). Under each paragraph pair come its best sentence "
    "pairs: the cosine, a source sentence, then after ~ its most similar sentence in paragraph j; [start:end] are "
    "character offsets, the hit's into its stored text (title and paragraphs, sentences joined by a space, "
    "paragraphs by a blank line), the source's into its own stored text, or into the query text as given "
    "(--text, --file). With several sources (--like, --unlike), a line under the hit gives each source's own score "
    "(like[k], unlike[k]; the hit's score is the like mean minus the unlike weight times the unlike mean) and each "
    "paragraph pair names its like source."
)
"""The legend ``sdr mlt --explain`` prints (also in README.md and docs/guide.md)."""

_SNIPPET_CHARS = 110


def _short(text: str, limit: int = _SNIPPET_CHARS) -> str:
    """``text`` on one line, cut at a word boundary to at most ``limit`` characters (with an ellipsis)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut[limit // 2 :] else cut) + "\u2026"


def _span(start: int | None, end: int | None) -> str:
    return f"[{start}:{end}]" if start is not None else "[?]"


def _weights_line(hybrid: dict) -> str:
    """The fusion and the weights it applied to this query (shares), with the configured ones when
    they differ (adaptive fusion sets the weights per query from them)."""
    applied = hybrid.get("weights_applied")
    configured = format_weights(hybrid["weights"])
    if not applied:
        return f"{hybrid['fusion']}, weights {configured}"
    shares = ", ".join(f"{name} {value:.3f}" for name, value in applied.items())
    total = sum(hybrid["weights"].values()) or 1.0
    same = all(abs(applied.get(k, 0.0) - v / total) < 5e-4 for k, v in hybrid["weights"].items())
    return f"{hybrid['fusion']}, weights applied {shares}" + ("" if same else f" from {configured}")


def format_result(result, *, explain: bool = False, width: int = 100) -> str:
    """The text ``sdr mlt`` prints: one row per hit (rank, score, id, title, metadata) with its
    snippet on the next line, or with ``explain`` the signals, paragraph pairs and whole sentence
    pairs with character offsets, then the legend; last, one summary line."""
    import textwrap

    lines = [f"{'rank':>4}  {'score':>8}  id"]
    for r, h in enumerate(result.hits, 1):
        row = f"{r:>4}  {h.score:8.4f}  {h.id}" + (f"  {h.title}" if h.title else "")
        if h.metadata:
            row += "  " + _short(json.dumps(dict(h.metadata), ensure_ascii=False, default=str), 80)
        lines.append(row)
        if h.snippet and not h.explanation:
            lines.append(f"{'':16}{h.snippet.cosine:.3f}  {_short(h.snippet.candidate_sentence)}")
        if h.explanation and h.sources:
            lines.append("        " + "  ".join(f"{x.role}[{x.index}] {x.score:.3f}" for x in h.sources))
        if h.explanation and h.signals:
            lines.append("        " + "  ".join(
                f"{name} {v.raw:.3f}" + (f" -> {v.normalised:.3f} x{v.weight:.3g}" if v.normalised is not None else "")
                for name, v in h.signals.items()
            ))
        if h.explanation:
            for p in h.explanation.paragraph_pairs:
                which = f"like[{p.source}] " if p.source is not None else ""
                lines.append(
                    f"        {which}paragraph {p.source_paragraph} ~ {p.candidate_paragraph}: "
                    f"normalised {p.normalised_score:.3f} (raw {p.paragraph_score:.3f})"
                )
                for sp in p.sentence_pairs:
                    lines += textwrap.wrap(f"{sp.cosine:.3f}  {_span(sp.source_start, sp.source_end)} {sp.source_sentence}",
                                           width, initial_indent=" " * 10, subsequent_indent=" " * 24)
                    lines += textwrap.wrap(f"~ {_span(sp.candidate_start, sp.candidate_end)} {sp.candidate_sentence}",
                                           width, initial_indent=" " * 17, subsequent_indent=" " * 24)
    if explain:
        lines += ["", *textwrap.wrap(EXPLAIN_LEGEND, width), ""]
    stale = " (stats stale: run `sdr stats`)" if result.stats_stale else ""
    how = "reranked exactly" if result.hybrid is None else f"fused ({_weights_line(result.hybrid)})"
    if result.sources:
        unlike = [x for x in result.sources if x["role"] == "unlike"]
        weight = f", unlike weight {-unlike[0]['weight']:g}" if unlike else ""
        lines.append(f"{len(result.sources) - len(unlike)} like and {len(unlike)} unlike sources: score = mean of "
                     f"the like sources' scores - unlike weight x mean of the unlike sources'{weight}")
    feedback = (result.hybrid or {}).get("feedback")
    if feedback:
        lines.append(f"document feedback: ranked again with {', '.join(feedback['ids'])} as further sources "
                     f"(share {feedback['share']:.2f}; --no-feedback for the source alone)")
    lines.append(f"{result.candidates} candidates {how}; stats from {result.stats_origin}{stale}")
    return "\n".join(lines)
