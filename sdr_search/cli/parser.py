"""The ``sdr`` argument parser: every subcommand's flags and ``--help``. A command's handler, in
the module of its group (``sdr_search.cli.<group>``), is imported only when that command runs, so
``sdr --help`` and a one-shot ``sdr mlt --id`` import neither torch nor transformers."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["build_parser"]


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (0 to 65535)")
    return value


def _add_encoder_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("encoder")
    g.add_argument("--model", metavar="DIR", help="local HuggingFace model directory (default: bundled all-MiniLM-L6-v2; env SDR_MODEL)")
    g.add_argument("--max-tokens", type=int, help="tokens per sentence before truncation (default 128; env SDR_MAX_TOKENS)")
    g.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], help="compute precision (default auto; env SDR_PRECISION)")
    g.add_argument("--device", help="auto, cpu, cuda or cuda:N (default auto; env SDR_DEVICE)")
    g.add_argument("--cache-dir", type=Path, help="embedding cache directory (default ~/.cache/sdr-search; env SDR_CACHE_DIR)")
    g.add_argument("--no-cache", action="store_true", help="do not read or write the embedding cache")


def _add_segmentation_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("segmentation")
    g.add_argument(
        "--paragraph-unit", choices=["paragraph", "section"],
        help="what one SDR paragraph is for inputs with sections (default paragraph; env SDR_PARAGRAPH_UNIT)",
    )
    g.add_argument(
        "--min-paragraph-sentences", type=int, metavar="N",
        help="merge consecutive paragraphs until each SDR paragraph has N sentences (default 8; 1 = as given; "
        "env SDR_MIN_PARAGRAPH_SENTENCES)",
    )
    g.add_argument(
        "--min-sentence-chars", type=int, metavar="C",
        help="join sentences shorter than C characters to a neighbour (default 20; 0 = as split; env SDR_MIN_SENTENCE_CHARS)",
    )
    g.add_argument("--strict", action="store_true", help="stop at the first bad document instead of skipping it")


def _add_hybrid_args(p: argparse.ArgumentParser, *, feedback: bool = True) -> None:
    g = p.add_argument_group("hybrid (--method hybrid)")
    g.add_argument("--fusion", choices=["zscore", "minmax", "rrf", "adaptive"],
                   help="per-query normalisation of the signals (zscore, minmax), reciprocal-rank fusion, or adaptive "
                   "(z-score with weights set per query by the source's length: short sources lean to BM25, long ones to "
                   "SDR; --weights multiply them; docs/scoring.md) (default: the index's default (sdr defaults), else env "
                   "SDR_FUSION, else adaptive)")
    g.add_argument("--weights", metavar="W",
                   help="weight per signal, e.g. bm25=1,mean=1,sdr=0.5 (signals: bm25, sdr, mean; left out = 0; default: "
                   "the index's default, else env SDR_HYBRID_WEIGHTS, else bm25=1,sdr=1,mean=1)")
    g.add_argument("--rank-constant", type=int, metavar="K", help="RRF rank constant (default 60)")
    if feedback:
        g.add_argument("--feedback", action=argparse.BooleanOptionalAction, default=None,
                       help="adaptive fusion's document feedback: a short source is ranked again with its top hits as "
                       "further sources (docs/scoring.md 'Document feedback'; default: env SDR_FEEDBACK, else on)")



def _add_stats_args(p: argparse.ArgumentParser, *, skip: str) -> None:
    """The statistics refresh a run ends with (``index``, ``reindex``): ``--no-stats`` (its help:
    ``skip``) leaves it out; else against a reference sample of ``--sample`` paragraphs (``--seed``)."""
    p.add_argument("--no-stats", action="store_true", help=skip)
    p.add_argument("--sample", type=int, default=5000, metavar="R", help="reference sample size for the statistics (default 5000)")
    p.add_argument("--seed", type=int, default=0)


def _add_store_args(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    g = p.add_argument_group("store (one of)")
    x = g.add_mutually_exclusive_group(required=required)
    x.add_argument("--store", type=Path, metavar="DIR", help="embedded store directory (one machine, no servers)")
    x.add_argument("--opensearch", metavar="URL", help="OpenSearch URL, e.g. http://localhost:9200, or a cluster's nodes comma-separated (env SDR_OPENSEARCH_URL)")
    g.add_argument("--index", metavar="NAME", help="OpenSearch index or alias (default: env SDR_OPENSEARCH_INDEX or sdr)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sdr",
        description="sdr-search: long-document 'more like this' with SDR (self-supervised document similarity ranking).",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--debug", action="store_true", help="show stack traces for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    ev = sub.add_parser(
        "eval",
        help="rank a whole corpus for every query and print relevance metrics as JSON",
        description=(
            "Rank every corpus document for every query (exhaustively) and print one JSON object "
            "with MPR, MRR, HR@10, MAP, P@10, Recall@100, nDCG@10 and the query count; with --method "
            "hybrid also the fusion weights used per query kind (sources of one paragraph, of several)."
        ),
    )
    ev.add_argument("--corpus", nargs="+", metavar="PATH", help="corpus: .jsonl[.gz] files or .txt directories (exhaustive ranking)")
    ev.add_argument("--candidates", type=int, help="with --store: K documents reranked exactly; with --method hybrid: the top K "
                    "of each signal form the fused set (default 100; with --store env SDR_CANDIDATES)")
    ev.add_argument("--queries", required=True, nargs="+", metavar="PATH", help="query documents, same formats")
    ev.add_argument("--qrels", required=True, metavar="PATH", help="TREC qrels file")
    ev.add_argument("--method", default="sdr", choices=["sdr", "sdr-nonorm", "mean", "bm25", "hybrid"],
                    help="ranking method (default sdr); hybrid fuses bm25, sdr and mean (see --fusion, --weights)")
    ev.add_argument("--run", metavar="OUT", type=Path, help="write a TREC run file here")
    ev.add_argument("--run-depth", type=int, default=1000, help="documents per query in the run file (default 1000)")
    ev.add_argument("--run-tag", default=None, help="tag column of the run file (default: the method)")
    ev.add_argument(
        "--stats", choices=["exact", "sampled"], default="exact",
        help="normalisation statistics for --method sdr: every corpus paragraph (exact) or a reference sample",
    )
    ev.add_argument("--sample", type=int, default=5000, metavar="R", help="reference sample size for --stats sampled (default 5000)")
    ev.add_argument("--seed", type=int, default=0, help="seed of the reference sample (default 0)")
    ev.add_argument("--no-progress", action="store_true", help="no progress bars")
    ev.add_argument("--source-cut", metavar="CUT", default=None,
                    help="cut every query to a short source before ranking (same qrels): 'sentences:N' keeps its first N "
                    "sentences as one paragraph, 'paragraphs:N' its first N SDR paragraphs, 'full' (default) all of it; "
                    "the short-source dev set is sentences:9 (docs/results/relevance.md)")
    _add_store_args(ev, required=False)
    _add_hybrid_args(ev)
    _add_encoder_args(ev)
    _add_segmentation_args(ev)
    ev.set_defaults(handler=_lazy("eval", "cmd_eval"))

    ix = sub.add_parser(
        "index", help="index documents into an embedded store (resumable)",
        description="Encode documents and write them to an embedded store in DIR (created if needed). "
        "Unchanged documents are skipped, so an interrupted run resumes. Ends by refreshing the "
        "normalisation statistics against a reference sample (see `sdr stats`).",
    )
    _add_store_args(ix)
    ix.add_argument("paths", nargs="+", metavar="PATH", help=".jsonl[.gz] files or directories of .txt files")
    _add_stats_args(ix, skip="leave statistics stale (refresh later with `sdr stats`)")
    ix.add_argument("--no-progress", action="store_true")
    _add_encoder_args(ix)
    _add_segmentation_args(ix)
    ix.set_defaults(handler=_lazy("index", "cmd_index"))

    ml = sub.add_parser(
        "mlt", help="more like this: documents of a store most similar to a document",
        description="More like this from a store. Default method hybrid: nested sentence k-NN candidates united with "
        "the lexical (BM25) top K, scored with BM25, exact SDR and the single-vector cosine and fused per query "
        "(docs/scoring.md). --method sdr: the two-stage exact SDR ranking alone.",
    )
    _add_store_args(ml)
    src = ml.add_mutually_exclusive_group()
    src.add_argument("--id", help="an indexed document")
    src.add_argument("--file", type=Path, help="a new document: .txt (raw text) or .json/.jsonl (a record)")
    src.add_argument("--text", help="a new document as text")
    ml.add_argument("--like", action="append", metavar="ID",
                    help="several sources: an indexed document (repeat for more; with --like-file too); the score is the "
                    "mean of each source's own score (docs/scoring.md)")
    ml.add_argument("--like-file", action="append", type=Path, metavar="FILE",
                    help="several sources: a new document from a file, as --file (repeatable)")
    ml.add_argument("--unlike", action="append", metavar="ID",
                    help="an indexed document the results should not resemble (repeatable)")
    ml.add_argument("--unlike-file", action="append", type=Path, metavar="FILE",
                    help="a new document the results should not resemble, as --file (repeatable)")
    ml.add_argument("--unlike-weight", type=float, metavar="W",
                    help="weight of the unlike term (default 0.5; env SDR_UNLIKE_WEIGHT)")
    ml.add_argument("--size", type=int, default=10, help="results (default 10)")
    ml.add_argument("--from", dest="offset", type=int, default=0, metavar="N", help="skip the first N results (paging)")
    ml.add_argument("--candidates", type=int, help="K documents reranked exactly (default 100; env SDR_CANDIDATES)")
    ml.add_argument("--filter", metavar="JSON",
                    help='metadata equality filter, as the HTTP API\'s "filter": e.g. \'{"court": "supreme", "year": [2019, 2020]}\' '
                    "(every field must match; a list matches any of its items)")
    ml.add_argument("--json", action="store_true", help="print JSON")
    ml.add_argument("--explain", action="store_true", help="add the best paragraph pairs and their best sentence pairs "
                    "(hybrid: also each signal's raw and normalised score)")
    ml.add_argument("--method", choices=["sdr", "hybrid"],
                    help="sdr: exact SDR over the vector candidates; hybrid: BM25 candidates too, signals fused (default: the "
                    "index's default (sdr defaults), else env SDR_METHOD, else hybrid)")
    _add_hybrid_args(ml)
    _add_encoder_args(ml)
    ml.set_defaults(handler=_lazy("mlt", "cmd_mlt"))

    st = sub.add_parser(
        "stats", help="recompute normalisation statistics of a store",
        description="Recompute every paragraph's normalisation statistics: exact (against all corpus "
        "paragraphs; O(sentences^2)) by default, or against a reference sample of R paragraphs with --sample R.",
    )
    _add_store_args(st)
    st.add_argument("--sample", type=int, metavar="R", help="sampled statistics against R paragraphs instead of exact")
    st.add_argument("--reference-size", type=int, default=5000, metavar="R",
                    help="size of the reference sample recorded for new-text queries when computing exact stats (default 5000)")
    st.add_argument("--seed", type=int, default=0)
    st.add_argument("--no-progress", action="store_true")
    st.set_defaults(handler=_lazy("index", "cmd_stats"))

    df = sub.add_parser(
        "defaults", help="show or set an index's search defaults (method, hybrid fusion and weights)",
        description="Print the search defaults recorded in the index as JSON; with options, change them first. "
        "A request's or `sdr mlt`'s own --method/--fusion/--weights win over these; these win over the "
        "environment (SDR_METHOD, SDR_FUSION, SDR_HYBRID_WEIGHTS).",
    )
    _add_store_args(df)
    df.add_argument("--method", choices=["sdr", "hybrid"], help="default ranking method of the index")
    _add_hybrid_args(df, feedback=False)
    df.add_argument("--clear", action="store_true", help="forget the recorded defaults (before applying any option given)")
    df.set_defaults(handler=_lazy("index", "cmd_defaults"))

    inf = sub.add_parser("info", help="counts, model and statistics state of a store")
    _add_store_args(inf)
    inf.add_argument("--json", action="store_true")
    inf.set_defaults(handler=_lazy("index", "cmd_info"))

    dl = sub.add_parser(
        "delete", help="delete documents from a store by id",
        description="Delete documents by id (arguments, or --ids-file with one id per line; - reads stdin). Prints "
        "{deleted, missing}. The statistics become stale: run `sdr stats` (a server refreshes them itself).",
    )
    _add_store_args(dl)
    dl.add_argument("ids", nargs="*", metavar="ID", help="document ids")
    dl.add_argument("--ids-file", type=Path, metavar="FILE", help="one id per line (- for stdin)")
    dl.set_defaults(handler=_lazy("maintenance", "cmd_delete"))

    cp = sub.add_parser(
        "compact", help="reclaim the dead rows of an embedded store (replaced or deleted documents)",
        description="Rewrite the vector file and the FAISS index of an embedded store without dead rows (left by "
        "replaced and deleted documents). Atomic and crash-safe; readers in other processes keep working "
        "(they reload the new files). An OpenSearch index merges its segments itself.",
    )
    cp.add_argument("--store", type=Path, metavar="DIR", required=True, help="embedded store directory")
    cp.set_defaults(handler=_lazy("maintenance", "cmd_compact"))

    sv = sub.add_parser(
        "serve", help="serve more-like-this over HTTP (FastAPI + uvicorn)",
        description="Serve one store over HTTP: POST /v1/indices/{index}/more_like_this, GET "
        "/v1/indices/{index}/documents/{id}, /health, /metrics (OpenAPI at /openapi.json). Settings: env "
        "SDR_SERVICE_* (limits, concurrency, SDR_SERVICE_API_KEY). An embedded store is served as index `default` unless --index "
        "names it. Without an API key only a loopback host is allowed unless --insecure.",
    )
    _add_store_args(sv)
    sv.add_argument("--host", help="interface to bind (default 127.0.0.1; env SDR_SERVICE_HOST)")
    sv.add_argument("--port", type=_port, help="TCP port, 0 to 65535 (0: any free port; default 8000; env SDR_SERVICE_PORT)")
    sv.add_argument("--candidates", type=int, help="default K documents reranked exactly (default 100; env SDR_CANDIDATES)")
    sv.add_argument("--insecure", action="store_true", help="allow a non-loopback host without an API key (logs a warning)")
    sv.add_argument("--access-log", action="store_true", help="log every request (uvicorn access log)")
    _add_encoder_args(sv)
    sv.set_defaults(handler=_lazy("serve", "cmd_serve"))

    db = sub.add_parser(
        "dashboards", help="OpenSearch Dashboards saved objects (index pattern, saved search, visualizations)",
        description="Manage sdr-search's OpenSearch Dashboards saved objects.",
    )
    db_sub = db.add_subparsers(dest="dashboards_command", metavar="ACTION", required=True)
    dbi = db_sub.add_parser(
        "import", help="import mappings/dashboards.ndjson into OpenSearch Dashboards",
        description="POST the saved objects to URL/api/saved_objects/_import (header osd-xsrf: true; existing "
        "objects with the same ids are overwritten unless --no-overwrite) and print a JSON summary.",
    )
    dbi.add_argument("--url", required=True, help="OpenSearch Dashboards base URL, e.g. http://localhost:5601")
    dbi.add_argument("--index", metavar="NAME",
                     help="the index or alias whose documents the index pattern shows; the pattern's title is this "
                     "exact name, so after `sdr reindex` only the index behind the alias counts and the state "
                     "indices never match (default: env SDR_OPENSEARCH_INDEX or sdr)")
    dbi.add_argument("--file", type=Path, metavar="PATH", help="saved objects ndjson (default: mappings/dashboards.ndjson)")
    dbi.add_argument("--no-overwrite", action="store_true", help="report objects that already exist as conflicts instead of replacing them")
    dbi.add_argument("--timeout", type=float, default=30, help="seconds to wait for an answer (default 30)")
    dbi.set_defaults(handler=_lazy("dashboards", "cmd_dashboards_import"))

    rx = sub.add_parser(
        "reindex", help="build a new index from documents and switch the live name to it atomically",
        description="Index documents into a NEW index (embedded: a directory DIR-<timestamp> beside DIR, then "
        "DIR, a symbolic link, is switched to it in one rename; OpenSearch: a concrete index ALIAS-<timestamp>, "
        "then one _aliases call moves ALIAS). Readers see the old index or the new one, never a half-built one. "
        "Batches go through Celery workers when a broker is configured (--workers-broker, SDR_BROKER_URL or "
        "REDIS_URL), else they are encoded in this process. Resumable: re-running after an interruption "
        "continues into the same new index and skips documents already there. Prints a JSON summary.",
    )
    _add_store_args(rx)
    rx.add_argument("paths", nargs="+", metavar="PATH", help=".jsonl[.gz] files or directories of .txt files")
    rx.add_argument("--workers-broker", metavar="URL", help="Celery broker (default: env SDR_BROKER_URL, else REDIS_URL; none: in-process)")
    rx.add_argument("--in-process", action="store_true", help="encode in this process even when a broker is configured")
    rx.add_argument("--batch-docs", type=int, metavar="N", help="most documents per task (default 64; env SDR_BATCH_DOCS; SDR_BATCH_CHARS caps the text per task)")
    rx.add_argument("--restart", action="store_true", help="ignore an unfinished reindex and start a new target")
    rx.add_argument("--timeout", type=float, metavar="SECONDS", help="give up (resumable) after this long (default: wait)")
    rx.add_argument("--max-failed-fraction", type=float, default=0.01, metavar="F",
                    help="do not switch when more than this fraction of documents failed (default 0.01)")
    _add_stats_args(rx, skip="switch without computing statistics (run `sdr stats` later)")
    rx.add_argument("--no-progress", action="store_true")
    _add_encoder_args(rx)
    _add_segmentation_args(rx)
    rx.set_defaults(handler=_lazy("workers", "cmd_reindex"))

    tr = sub.add_parser(
        "train", help="adapt the encoder to a corpus without labels (MLM + contrastive, or triplet)",
        description="Self-supervised SDR training (paper section 3.2): sentence pairs from the same paragraph "
        "(positives) and from different documents (negatives), MLM + contrastive loss (eq. 1, margin m) or "
        "MetricBERT's angular triplet loss with the hardest in-batch negative, or an in-batch-negatives (InfoNCE) "
        "loss; --trainable-layers freezes the lower layers. Writes a HuggingFace model "
        "directory that --model accepts everywhere, with provenance in its config.json. Checkpoints every "
        "--checkpoint-every steps; re-running the same command resumes. Settings: env SDR_TRAIN_*.",
    )
    tr.add_argument("--corpus", required=True, nargs="+", metavar="PATH", help="training documents: .jsonl[.gz] files or .txt directories")
    tr.add_argument("--out", required=True, type=Path, metavar="DIR", help="output model directory (checkpoints in DIR/checkpoints)")
    tr.add_argument("--base", metavar="MODEL", help="base model directory (default: bundled all-MiniLM-L6-v2)")
    tr.add_argument("--objective", choices=["sdr", "triplet", "inbatch"], help="training objective (default sdr; "
                    "inbatch: in-batch-negatives contrastive loss, InfoNCE)")
    tr.add_argument("--steps", type=int, help="optimiser steps (default 1000)")
    tr.add_argument("--batch-size", type=int, help="sentence pairs per step (default 32)")
    tr.add_argument("--lr", type=float, help="peak learning rate (default 1e-5)")
    tr.add_argument("--max-tokens", type=int, help="tokens per training sentence (default 64)")
    tr.add_argument("--margin", type=float, help="contrastive margin m for --objective sdr (default 1)")
    tr.add_argument("--triplet-margin", type=float, help="angular margin for --objective triplet (default 0.1)")
    tr.add_argument("--temperature", type=float, help="softmax temperature for --objective inbatch (default 0.05)")
    tr.add_argument("--mlm-weight", type=float, help="weight of the MLM loss (default 1)")
    tr.add_argument("--trainable-layers", type=int, metavar="N", help="train only the top N transformer layers "
                    "and what sits above them; embeddings and lower layers frozen (default: all)")
    tr.add_argument("--head-warmup-steps", type=int, help="steps before --steps that train only a newly initialised "
                    "MLM head, encoder frozen (default 200; 0: off)")
    tr.add_argument("--head-warmup-lr", type=float, help="learning rate of the MLM head warm-up (default 5e-4)")
    tr.add_argument("--max-sentences-per-paragraph", type=int, help="sentences sampled per paragraph (default 32)")
    tr.add_argument("--positive-fraction", type=float, help="--objective sdr: share of sampled pairs that are "
                    "same-paragraph positives, the rest different-document negatives (default 0.5)")
    tr.add_argument("--checkpoint-every", type=int, help="steps between checkpoints (default 200)")
    tr.add_argument("--seed", type=int, help="random seed (default 0)")
    tr.add_argument("--device", help="auto, cpu, cuda or cuda:N (default auto)")
    tr.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], help="autocast precision (default auto: bf16 on CUDA and native-bf16 CPUs, else fp32)")
    tr.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    tr.add_argument("--restart", action="store_true", help="discard checkpoints in --out and start over")
    tr.add_argument("--no-progress", action="store_true")
    _add_segmentation_args(tr)
    tr.set_defaults(handler=_lazy("train", "cmd_train"))

    wk = sub.add_parser(
        "worker", help="run a Celery worker that embeds and indexes batches for `sdr reindex`",
        description="Start a Celery worker consuming the indexing queue (env SDR_QUEUE, default sdr-index). Each "
        "process loads the encoder once. With N processes on C cores each gets C/N torch threads unless "
        "--threads or SDR_TORCH_THREADS says otherwise.",
    )
    wk.add_argument("--broker", metavar="URL", help="Celery broker (default: env SDR_BROKER_URL, else REDIS_URL)")
    wk.add_argument("--concurrency", type=int, default=1, metavar="N", help="worker processes (default 1)")
    wk.add_argument("--pool", choices=["prefork", "solo", "threads"], help="Celery pool (default: solo for 1 process, else prefork)")
    wk.add_argument("--threads", type=int, metavar="T", help="torch threads per process (default: cores / N)")
    wk.add_argument("--name", metavar="NAME", help="worker node name, e.g. w1@%%h (default: celery@hostname)")
    wk.set_defaults(handler=_lazy("workers", "cmd_worker"))
    return parser


def _lazy(group: str, name: str):
    """The handler ``name`` of ``sdr_search.cli.<group>``, imported when the command runs."""

    def handler(args):
        import importlib

        return getattr(importlib.import_module(f"{__package__}.{group}"), name)(args)

    return handler
