"""One-shot ``sdr mlt`` wall time (issue 24: a CLI that starts fast), and where it goes.

Runs ``sdr mlt`` as a user would, a fresh process each time, by id and by text, with the
encoder's own BERT forward pass (``SDR_ENCODER_BACKEND=auto``, the default) and through
transformers (``SDR_ENCODER_BACKEND=transformers``, the path before), alternating the two so
that a busy machine weighs on both alike; prints the median and min of each and their ratio. Then
the parts, each in a fresh process: ``import torch``, ``import
nltk`` (Punkt), transformers' BERT module, the encoder's model load on each backend (torch
already imported), and the index load (opening the store read-only, a first k-NN and a first
lexical search).

    ./scripts/demo.sh                       # builds runs/demo-store
    python bench/cli_start.py --store runs/demo-store --repeat 5
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
    "import nltk (Punkt)": "import nltk.tokenize.punkt",
    "import transformers' BERT": "import torch; import transformers.models.bert.modeling_bert",
}
LOAD = ("import time, torch; from sdr_search.core.encoder import SentenceEncoder; "
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
    args = ap.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    base = [SDR, "mlt", "--store", args.store, "--size", "5"]
    kinds = {"by id": ["--id", args.id], "by text": ["--text", TEXT], "by text, --no-feedback": ["--text", TEXT, "--no-feedback"]}
    backends = ("auto", "transformers")
    wall(base + kinds["by text"], env)  # warm the page cache
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeat):
        for kind, extra in kinds.items():
            for backend in backends:
                if kind == "by id" and backend == "transformers":
                    continue  # by id loads no model
                times.setdefault((kind, backend), []).append(wall(base + extra, {**env, "SDR_ENCODER_BACKEND": backend}))
    print(f"one-shot sdr mlt on {args.store}, {args.repeat} runs each (seconds, median / min)")
    print(f"{'request':<26} {'own BERT (default)':>20} {'transformers':>16} {'ratio':>7}")
    for kind in kinds:
        own = times[(kind, "auto")]
        hf = times.get((kind, "transformers"))
        cells = f"{statistics.median(own):>9.2f} / {min(own):.2f}"
        if hf:
            print(f"{kind:<26} {cells:>20} {statistics.median(hf):>8.2f} / {min(hf):.2f} "
                  f"{statistics.median(own) / statistics.median(hf):>7.2f}")
        else:
            print(f"{kind:<26} {cells:>20} {'(no model)':>16}")
    print("\nparts, each in a fresh process (seconds, median)")
    for name, code in PARTS.items():
        print(f"{name:<34} {statistics.median(timed_snippet(code, env) for _ in range(args.repeat)):>6.2f}")
    for backend in backends:
        code = LOAD.format(backend=backend)
        print(f"{'model load, ' + backend:<34} {statistics.median(timed_snippet(code, env) for _ in range(args.repeat)):>6.2f}")
    code = OPEN.format(store=args.store)
    print(f"{'open the store, first searches':<34} {statistics.median(timed_snippet(code, env) for _ in range(args.repeat)):>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
