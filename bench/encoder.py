"""Encoder throughput: the full pipeline next to the bare model forward pass, backends side by side.

Every configuration (model x backend x precision) encodes the same sentences two ways:
- ``pipeline``: ``SentenceEncoder.encode`` (tokenise, sort by length, batch under the token budget,
  forward, pool, normalise, restore order);
- ``bare``: only the model's forward pass on the very same pre-built padded batches;
and, with ``--naive``, fixed batches of 64 in input order (no length sorting), to show what length
sorting buys. Overhead = pipeline time / bare time - 1 (target <= 10 %).

Rounds are interleaved: each of ``--repeat`` rounds times every configuration once, so that a busy
machine weighs on all of them alike; the table gives the median and the best rate over the rounds,
and the load average is printed before and after. The cosine columns compare each configuration's
vectors with torch fp32's on the same model (``SDR_ENCODER_BACKEND=auto``, ``SDR_PRECISION=fp32``):
mean and minimum over the sentences. ``per CPU-s``: the pipeline's sentences per second of this
process's CPU time (all threads; a spinning thread pool counts), less sensitive to other processes
than the wall-clock rates when the machine is shared.

Usage: python bench/encoder.py [--sentences 3000] [--data ../shared/data/irled/corpus.jsonl.gz] [--model DIR ...]

``--model DIR`` (repeatable; ``default`` is the bundled all-MiniLM-L6-v2) measures each model on the
same sentences. ``--backends auto,transformers,onnx,onnx-int8`` puts the encoder's own BERT forward
pass (``auto``), transformers' and ONNX Runtime's (fp32 and int8; these ignore ``--precisions``) on
the same batches. ``--json OUT`` writes every number.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdr_search.core.documents import read_documents  # noqa: E402
from sdr_search.core.encoder import SentenceEncoder, plan_batches  # noqa: E402
from sdr_search.core.onnx_backend import ONNX_BACKENDS, pad_numpy  # noqa: E402
from sdr_search.core.settings import EncoderSettings  # noqa: E402


def load_sentences(path: Path, n: int) -> list[str]:
    out: list[str] = []
    for doc in itertools.islice(read_documents(path), 0, None):
        out.extend(doc.sentences)
        if len(out) >= n:
            break
    return out[:n]


def timed(fn) -> tuple[float, float]:
    """Wall-clock and CPU seconds (this process, all its threads) of ``fn()``."""
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def bare_pass(enc: SentenceEncoder, ids: list[list[int]]):
    """A function that runs only the model's forward pass over ``ids``' batches, built beforehand."""
    batches = plan_batches([len(x) for x in ids], enc.settings.max_batch_tokens)
    model = enc._model
    if enc.settings.encoder_backend in ONNX_BACKENDS:
        padded = [pad_numpy([ids[i] for i in b], enc._tokenizer.pad_id) for b in batches]

        def run_onnx():
            for input_ids, mask in padded:
                model.hidden(input_ids, mask)

        return run_onnx
    import torch

    padded = [enc._tokenizer.pad([ids[i] for i in b]) for b in batches]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(enc.precision)
    dev = enc._device

    def run_torch():
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

    return run_torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=3000)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "irled" / "corpus.jsonl.gz")
    ap.add_argument("--precisions", default="fp32,bf16", help="torch precisions (the onnx backends have their own)")
    ap.add_argument("--backends", default="auto",
                    help="comma-separated SDR_ENCODER_BACKEND values (auto, transformers, onnx, onnx-int8)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--repeat", type=int, default=2, help="interleaved rounds")
    ap.add_argument("--naive", action="store_true", help="also time fixed batches of 64 in input order (once)")
    ap.add_argument("--model", action="append", default=[], metavar="DIR",
                    help="model directory or 'default' (repeatable; default: the bundled model)")
    ap.add_argument("--threads", type=int, help="threads for torch and ONNX Runtime (default: their own, one per core)")
    ap.add_argument("--json", type=Path, metavar="OUT")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
        os.environ["SDR_TORCH_THREADS"] = str(args.threads)  # read by the ONNX backend

    sentences = load_sentences(args.data, args.sentences)
    n = len(sentences)
    load0 = os.getloadavg()
    print(f"{n} sentences from {args.data.name}; {os.cpu_count()} CPUs; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    configs = []
    for model, backend in itertools.product(args.model or ["default"], args.backends.split(",")):
        precisions = [ONNX_BACKENDS[backend]] if backend in ONNX_BACKENDS else args.precisions.split(",")
        for precision in precisions:
            if (model, backend, precision) not in [(c["model"], c["backend"], c["precision"]) for c in configs]:
                configs.append({"model": model, "backend": backend, "precision": precision})
    refs: dict[str, np.ndarray] = {}
    for c in configs:
        settings = {"model": None if c["model"] == "default" else c["model"], "device": args.device}
        if c["model"] not in refs:  # torch fp32 on the same model: the vectors every row is compared with
            ref = SentenceEncoder(settings=EncoderSettings(**settings, precision="fp32", encoder_backend="auto"))
            refs[c["model"]] = ref.encode(sentences)
        precision = "auto" if c["backend"] in ONNX_BACKENDS else c["precision"]
        t = time.perf_counter()
        enc = SentenceEncoder(settings=EncoderSettings(**settings, precision=precision, encoder_backend=c["backend"]))
        enc.encode(sentences[:64])  # load (and export, the first time) + warm up
        c.update(enc=enc, load_s=time.perf_counter() - t, ids=enc.tokenize(sentences), pipeline=[], bare=[], cpu=[])
        c["bare_fn"] = bare_pass(enc, c["ids"])
        c["name"] = f"{Path(enc.model_id).name[-20:]} {enc.backend} {enc.precision}"
        print(f"loaded {c['name']} in {c['load_s']:.1f} s", flush=True)
    for r in range(args.repeat):
        for c in configs:
            out = {}

            def pipeline(enc=c["enc"], out=out):
                out["v"] = enc.encode(sentences)

            wall, cpu = timed(pipeline)
            c["pipeline"].append(n / wall)
            c["cpu"].append(n / cpu)
            c["bare"].append(n / timed(c["bare_fn"])[0])
            cos = np.sum(refs[c["model"]] * out["v"], axis=1)
            c["cos_mean"], c["cos_min"] = float(cos.mean()), float(cos.min())
            print(f"  round {r + 1}: {c['name']:<44} pipeline {c['pipeline'][-1]:7.1f}  bare {c['bare'][-1]:7.1f} "
                  f"sentences/s; pipeline {c['cpu'][-1]:7.1f} per CPU-second (load {os.getloadavg()[0]:.2f})", flush=True)
    if args.naive:
        for c in configs:
            ids = c["ids"]
            c["naive"] = n / timed(lambda enc=c["enc"], ids=ids: [enc.forward_batch(ids[i : i + 64]) for i in range(0, n, 64)])[0]
    load1 = os.getloadavg()
    print(f"\nsentences/s, median (best) of {args.repeat} interleaved rounds; load average after: "
          f"{load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    print(f"{'model':>20} {'backend':>12} {'precision':>9} {'pipeline':>16} {'bare forward':>16} {'overhead':>9} "
          f"{'naive b=64':>11} {'per CPU-s':>10} {'cos mean':>9} {'cos min':>9}")
    rows = []
    for c in configs:
        med_p, med_b = statistics.median(c["pipeline"]), statistics.median(c["bare"])
        enc = c["enc"]
        naive = f"{c['naive']:11.1f}" if "naive" in c else f"{'-':>11}"
        print(f"{Path(enc.model_id).name[-20:]:>20} {enc.backend:>12} {enc.precision:>9} "
              f"{med_p:8.1f} ({max(c['pipeline']):5.1f}) {med_b:8.1f} ({max(c['bare']):5.1f}) {med_b / med_p - 1:9.1%} "
              f"{naive} {statistics.median(c['cpu']):10.1f} {c['cos_mean']:9.6f} {c['cos_min']:9.6f}", flush=True)
        rows.append({k: c[k] for k in ("model", "backend", "precision", "pipeline", "bare", "cpu", "cos_mean", "cos_min",
                                       "load_s")}
                    | {"tag": enc.cache_tag, "naive": c.get("naive")})
    if args.json:
        args.json.write_text(json.dumps({"sentences": n, "load_before": load0, "load_after": load1, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
