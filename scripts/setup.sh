#!/usr/bin/env bash
# Create .venv and install sdr-search with its test extra.
# torch is pinned to 2.13.0 so CPU machines take the local CPU wheel instead of GBs of CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test]"
.venv/bin/python -c "import torch, transformers, nltk, bm25s; print('installed: torch', torch.__version__, '| transformers', transformers.__version__)"
