"""Encoder throughput: the full pipeline next to the bare model forward pass, in one run.

For each precision, the same sentences are encoded three ways:
- ``pipeline``: ``SentenceEncoder.encode`` (tokenise, sort by length, batch under the token budget,
  forward, mean-pool, normalise, restore order);
- ``bare``: only ``model(input_ids, attention_mask)`` on the very same pre-built padded batches;
- ``naive``: fixed batches of 64 in input order (no length sorting), forward + pooling, to show what
  length sorting buys.
Overhead = pipeline time / bare time - 1 (target <= 10 %).

Usage: python bench/encoder.py [--sentences 3000] [--data ../shared/data/irled/corpus.jsonl.gz] [--model DIR ...]

``--model DIR`` (repeatable; ``default`` is the bundled all-MiniLM-L6-v2) measures each model on the
same sentences, one table row per model, backend and precision; the cosine column compares each row
with the first backend and precision of the same model. ``--backends auto,transformers`` puts the
encoder's own BERT forward pass (``SDR_ENCODER_BACKEND=auto``) next to transformers' on the same
batches.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdr_search.core.documents import read_documents  # noqa: E402
from sdr_search.core.encoder import SentenceEncoder, plan_batches  # noqa: E402
from sdr_search.core.settings import EncoderSettings  # noqa: E402


def load_sentences(path: Path, n: int) -> list[str]:
    out: list[str] = []
    for doc in itertools.islice(read_documents(path), 0, None):
        out.extend(doc.sentences)
        if len(out) >= n:
            break
    return out[:n]


def timed(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=3000)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "irled" / "corpus.jsonl.gz")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--backends", default="auto", help="comma-separated SDR_ENCODER_BACKEND values (auto, transformers)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--model", action="append", default=[], metavar="DIR",
                    help="model directory or 'default' (repeatable; default: the bundled model)")
    args = ap.parse_args()

    import torch

    sentences = load_sentences(args.data, args.sentences)
    print(f"{len(sentences)} sentences from {args.data.name}; torch threads={torch.get_num_threads()}")
    print(f"{'model':>20} {'backend':>12} {'precision':>9} {'pipeline s/s':>13} {'bare fwd s/s':>13} {'overhead':>9} {'naive b=64 s/s':>15} {'cos vs 1st':>11}")
    backends = args.backends.split(",")
    for model, backend, precision in itertools.product(args.model or ["default"], backends, args.precisions.split(",")):
        if precision == args.precisions.split(",")[0] and backend == backends[0]:
            ref = None
        enc = SentenceEncoder(settings=EncoderSettings(model=None if model == "default" else model, precision=precision,
                                                       device=args.device, encoder_backend=backend))
        enc.encode(sentences[:64])  # load + warm up
        ids = enc.tokenize(sentences)
        batches = plan_batches([len(x) for x in ids], enc.settings.max_batch_tokens)
        padded = [enc._tokenizer.pad([ids[i] for i in b]) for b in batches]
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(enc.precision)
        model, dev = enc._model, enc._device

        def bare():
            with torch.inference_mode():
                for input_ids, mask in padded:
                    input_ids, mask = input_ids.to(dev), mask.to(dev)
                    if dtype is None:
                        model.hidden(input_ids, mask)
                    else:
                        with torch.autocast(device_type=dev.type, dtype=dtype):
                            model.hidden(input_ids, mask)
            if dev.type == "cuda":
                torch.cuda.synchronize()

        def naive():
            for i in range(0, len(ids), 64):
                enc.forward_batch(ids[i : i + 64])

        out = {}

        def pipeline():
            out["v"] = enc.encode(sentences)

        t_pipe = timed(pipeline, args.repeat)
        t_bare = timed(bare, args.repeat)
        t_naive = timed(naive, 1)
        if ref is None:
            ref = out["v"]
        cos = float(np.min(np.sum(ref * out["v"], axis=1)))
        n = len(sentences)
        print(
            f"{Path(enc.model_id).name[-20:]:>20} {enc.backend:>12} {enc.precision:>9} {n / t_pipe:13.1f} {n / t_bare:13.1f} {t_pipe / t_bare - 1:9.1%} "
            f"{n / t_naive:15.1f} {cos:11.6f}", flush=True
        )


if __name__ == "__main__":
    main()
