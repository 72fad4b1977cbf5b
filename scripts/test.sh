#!/usr/bin/env bash
# The test command (README): unit + integration tiers; slow and gpu tiers are opt-in (-m slow / -m gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m pytest "$@"
