"""One-shot ``sdr mlt`` wall time (issue 24: a CLI that starts fast), and where it goes.

Runs ``sdr mlt`` as a user would, a fresh process each time, by id and by text, with the
encoder's own BERT forward pass (``SDR_ENCODER_BACKEND=auto``, the default) and through
transformers (``SDR_ENCODER_BACKEND=transformers``, the path before), alternating the backends so
that a busy machine weighs on all alike; prints the median and min of each and their ratio to the
first. Then the parts, each in a fresh process: ``import torch``, ``import onnxruntime``, ``import
nltk`` (Punkt), transformers' BERT module, the encoder's model load on each backend (torch
already imported for the torch backends), and the index load (opening the store read-only, a
first k-NN and a first lexical search).

    ./scripts/demo.sh                       # builds runs/demo-store
    python bench/cli_start.py --store runs/demo-store --repeat 5

``--backends auto,transformers,onnx,onnx-int8`` times other encoder backends by text the same way
(ONNX Runtime: the export made beforehand, as after a first use). A store answers only queries
encoded with its own encoder tag, so a backend whose vectors differ from the store's needs a store
built with it: ``--store-of onnx-int8=DIR`` (repeatable); ``--precision fp32`` sets
``SDR_PRECISION`` for the torch backends (a store built in fp32 serves torch fp32 and onnx alike).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SDR = str(Path(sys.executable).with_name("sdr"))
TEXT = ("Anarchism is a political philosophy that rejects the state and advocates self-governed "
        "societies based on voluntary institutions. Anarchists hold the state to be undesirable, "
        "unnecessary and harmful.")

PARTS = {
    "import torch": "import torch",
    "import onnxruntime": "import onnxruntime",
    "import nltk (Punkt)": "import nltk.tokenize.punkt",
    "import transformers' BERT": "import torch; import transformers.models.bert.modeling_bert",
}
LOAD = ("import time{torch}; from sdr_search.core.encoder import SentenceEncoder; "
        "from sdr_search.core.settings import EncoderSettings; t = time.perf_counter(); "
        "SentenceEncoder(settings=EncoderSettings(encoder_backend={backend!r})).load(); "
        "print(time.perf_counter() - t)")
OPEN = ("import time, numpy as np; from sdr_search.indexer.embedded.store import EmbeddedStore; "
        "t = time.perf_counter(); s = EmbeddedStore({store!r}, read_only=True); s.counts(); d = s.meta().dim; "
        "s.sentence_knn(np.ones((1, d), dtype=np.float32) / d ** 0.5, 10); s.lexical_search('state', 10); "
        "print(time.perf_counter() - t)")


def wall(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def timed_snippet(code: str, env: dict[str, str]) -> float:
    """Seconds a snippet reports (or its process's wall time, Python's start included, when it prints nothing)."""
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    return float(out.strip()) if out.strip() else time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="runs/demo-store")
    ap.add_argument("--id", default="wiki_12", help="document id for the by-id runs")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backends", default="auto,transformers",
                    help="SDR_ENCODER_BACKEND values timed by text (auto, transformers, onnx, onnx-int8); the first is the baseline")
    ap.add_argument("--store-of", action="append", default=[], metavar="BACKEND=DIR",
                    help="the store a backend queries (default --store), for backends whose encoder tag differs")
    ap.add_argument("--precision", help="SDR_PRECISION for the torch backends (default: unset, i.e. auto)")
    args = ap.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    backends = args.backends.split(",")
    stores = {b: args.store for b in backends} | dict(x.split("=", 1) for x in args.store_of)

    def backend_env(backend: str) -> dict[str, str]:
        extra = {"SDR_ENCODER_BACKEND": backend}
        if args.precision and not backend.startswith("onnx"):
            extra["SDR_PRECISION"] = args.precision
        return {**env, **extra}

    def command(backend: str, extra: list[str]) -> list[str]:
        return [SDR, "mlt", "--store", stores[backend], "--size", "5", *extra]

    kinds = {"by id": ["--id", args.id], "by text": ["--text", TEXT], "by text, --no-feedback": ["--text", TEXT, "--no-feedback"]}
    for backend in backends:  # warm the page cache (and make the ONNX export, if missing)
        wall(command(backend, kinds["by text"]), backend_env(backend))
    times: dict[tuple[str, str], list[float]] = {}
    load0 = os.getloadavg()
    for _ in range(args.repeat):
        for kind, extra in kinds.items():
            for backend in backends:
                if kind == "by id" and backend != backends[0]:
                    continue  # by id loads no model
                times.setdefault((kind, backend), []).append(wall(command(backend, extra), backend_env(backend)))
    load1 = os.getloadavg()
    print(f"one-shot sdr mlt, {args.repeat} runs each (seconds, median / min; ratio: median / {backends[0]}'s); "
          f"load average {load0[0]:.2f} before, {load1[0]:.2f} after")
    print(f"{'request':<26} " + " ".join(f"{b + ' (' + Path(stores[b]).name + ')':>26}" for b in backends))
    for kind in kinds:
        base = statistics.median(times[(kind, backends[0])])
        cells = []
        for backend in backends:
            got = times.get((kind, backend))
            if not got:
                cells.append(f"{'(no model)':>26}")
                continue
            ratio = "" if backend == backends[0] else f" x{statistics.median(got) / base:.2f}"
            cells.append(f"{f'{statistics.median(got):.2f} / {min(got):.2f}{ratio}':>26}")
        print(f"{kind:<26} " + " ".join(cells))
    print("\nparts, each in a fresh process (seconds, median)")
    for name, code in PARTS.items():
        print(f"{name:<34} {statistics.median(timed_snippet(code, env) for _ in range(args.repeat)):>6.2f}")
    for backend in backends:
        code = LOAD.format(backend=backend, torch="" if backend.startswith("onnx") else ", torch")
        print(f"{'model load, ' + backend:<34} {statistics.median(timed_snippet(code, backend_env(backend)) for _ in range(args.repeat)):>6.2f}")
    code = OPEN.format(store=args.store)
    print(f"{'open the store, first searches':<34} {statistics.median(timed_snippet(code, env) for _ in range(args.repeat)):>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
