"""Segmentation time against input size, old code against new, side by side (issue 41, case 10).

A new-text query or a document is segmented before anything else (:func:`sdr_search.core.documents.
source_document`: Punkt in chunks, lower-case starts joined, fragments joined, long sentences cut),
and a query's sentences are then located in the text it sent (:func:`sdr_search.reranker.offsets.
aligned_spans`). Before issue 41 three steps grew with the square of the input: joining a run of
pieces that open in lower case (one string rebuilt per piece), cutting a long sentence (the rest
copied per piece), and looking for a sentence the text does not hold (a search to the end of the
text per miss). This bench times both versions on the same inputs at 10k to 1M sentences:

- ``Ab.``: ``"Ab. " * n``, the issue's input (every fragment a Punkt candidate, joined into long
  sentences, cut at 2,000 characters);
- ``ab.``: ``"ab. " * n``, every piece opens in lower case (the old join was quadratic);
- ``prose``: ordinary sentences of 40-90 characters, cycled;
- ``misses``: paragraphs of ``He left."She came back to the valley.``, split at the quote and joined
  again with a space: a quarter of the sentences are not in the text as written (their offsets are
  None), which made the old offset lookup quadratic.

Both versions run with the sentence and size limits lifted, so the columns time the splitting
itself; the last column is the new code with the default limits: the refusal before splitting
(``SDR_MAX_SENTENCES`` x 4 possible sentence ends) and its time. The old code is read from a git
revision (``--old``, default the commit before issue 41) into a temporary package. Each cell runs
in a forked process with a time budget (``--budget``); a cell over it prints ``>budget``. A run is
recorded in docs/results/splitting.md.

Usage:

    python bench/splitting.py                          # 10k .. 1M sentences, the three inputs
    python bench/splitting.py --sizes 10000 100000 --patterns Ab. --budget 60
"""

from __future__ import annotations

import argparse
import importlib
import io
import multiprocessing
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROSE = [
    "The appellant was convicted of murder by the sessions court.",
    "The high court dismissed the appeal against the conviction.",
    "Counsel for the state argued that the evidence was sufficient.",
    "The witness could not recall the date of the meeting with the accused.",
    "The river flooded the northern valley in the spring of that year.",
    "Interest on the loan was charged at a fixed rate for the whole term.",
    "The tribunal found that the notice of demand was served late.",
    "Shares of the company were sold below their value before the merger.",
]
PATTERNS = {
    "Ab.": lambda n: "Ab. " * n,
    "ab.": lambda n: "ab. " * n,
    "prose": lambda n: " ".join(PROSE[i % len(PROSE)] for i in range(n)),
    # a break without white space (before a quote), joined again with a space: a sentence the text does
    # not hold as written, so its offsets are looked up and not found (a quarter of the sentences)
    "misses": lambda n: "\n\n".join(['He left."She came back to the valley.'] * n),
}
BASE = "087c94e"  # the last commit before issue 41's changes to segmentation


def old_modules(rev: str, into: Path):
    """``(documents, offsets)`` of revision ``rev``: its ``sdr_core`` as package ``sdr_core_old`` and
    its ``reranker/offsets.py`` as a module of it."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "sdr_core", "reranker/offsets.py"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "sdr_core").rename(into / "sdr_core_old")
    (into / "reranker" / "offsets.py").rename(into / "sdr_core_old" / "old_offsets.py")
    sys.path.insert(0, str(into))
    return importlib.import_module("sdr_core_old.documents"), importlib.import_module("sdr_core_old.old_offsets")


def _cell(documents, offsets, text: str, lifted: bool, out) -> None:
    settings = documents.SegmentationSettings(max_sentences=10**9, max_document_bytes=10**10) if lifted \
        else documents.SegmentationSettings()
    splitter = documents.default_splitter()
    t0 = time.perf_counter()
    try:
        doc = documents.source_document(text=text, settings=settings, splitter=splitter)
        t1 = time.perf_counter()
        offsets.aligned_spans(text, doc)
        out.send(("ok", t1 - t0, time.perf_counter() - t1, doc.n_sentences))
    except Exception as e:  # the bounded run's refusal
        out.send((type(e).__name__, time.perf_counter() - t0, 0.0, 0))


def timed(documents, offsets, text: str, lifted: bool, budget: float):
    """``(status, segment_s, offsets_s, sentences)`` in a forked process; None over ``budget``."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_cell, args=(documents, offsets, text, lifted, child))
    proc.start()
    got = parent.recv() if parent.poll(budget) else None
    if got is None:
        proc.kill()
    proc.join()
    return got


def _fmt(cell, n: int) -> str:
    if cell is None:
        return f"{'>budget':>31}"
    _, seg, off, _ = cell
    return f"{seg + off:9.2f} s {1e6 * (seg + off) / n:7.1f} us {off:7.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 31_623, 100_000, 316_228, 1_000_000])
    parser.add_argument("--patterns", nargs="+", default=list(PATTERNS), choices=list(PATTERNS))
    parser.add_argument("--old", default=BASE, help="git revision of the old code (default: %(default)s)")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per cell before giving up")
    args = parser.parse_args()

    from sdr_search.core import documents as new_documents
    from sdr_search.reranker import offsets as new_offsets

    with tempfile.TemporaryDirectory(prefix="sdr-old-") as tmp:
        old_documents, old_offsets = old_modules(args.old, Path(tmp))
        old_documents.default_splitter()  # NLTK loaded once, before the forks
        new_documents.default_splitter()
        print(f"old: {args.old}; new: the working tree. Segmentation + offsets of one text, per input size: "
              "the total, per sentence of input, and the offsets' part")
        print(f"{'input':6} {'sentences':>10} {'chars':>11} | {'old':>31} | {'new':>31} | {'new/old':>7} | "
              f"{'new, default limits (a document)':>40}")
        for name in args.patterns:
            skip_old = False
            for n in args.sizes:
                text = PATTERNS[name](n)
                old = None if skip_old else timed(old_documents, old_offsets, text, True, args.budget)
                skip_old = old is None  # a bigger input would only take longer
                new = timed(new_documents, new_offsets, text, True, args.budget)
                bounded = timed(new_documents, new_offsets, text, False, args.budget)
                ratio = f"{(new[1] + new[2]) / (old[1] + old[2]):7.3f}" if old and new else f"{'-':>7}"
                if bounded is None:
                    limits = f"{'>budget':>40}"
                elif bounded[0] == "ok":
                    limits = f"{'accepted, ' + str(bounded[3]) + ' sentences':>28} {bounded[1] + bounded[2]:9.2f} s"
                else:
                    limits = f"{'refused (' + bounded[0] + ')':>28} {bounded[1]:9.3f} s"
                print(f"{name:6} {n:>10,} {len(text):>11,} | {_fmt(old, n)} | {_fmt(new, n)} | {ratio} | {limits}",
                      flush=True)


if __name__ == "__main__":
    main()
