#!/usr/bin/env bash
# Main job: set up, index a small sample into an embedded store, print a more-like-this result.
# The sample is a slice of ../shared/data/wiki produced at run time (nothing is committed).
# Usage: ./scripts/demo.sh [N_ARTICLES] [STORE_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
STORE=${2:-runs/demo-store}
WIKI=${SDR_DEMO_WIKI:-../shared/data/wiki/articles-00.jsonl.gz}
start=$(date +%s)
./scripts/setup.sh
if [ ! -f "$WIKI" ]; then
  echo "demo: $WIKI not found (set SDR_DEMO_WIKI to a .jsonl.gz of documents)" >&2
  exit 2
fi
mkdir -p runs
SAMPLE=runs/demo-sample.jsonl
.venv/bin/python - "$WIKI" "$N" "$SAMPLE" <<'PY'
import gzip, itertools, sys
src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with gzip.open(src, "rt", encoding="utf-8") as fh, open(out, "w", encoding="utf-8") as w:
    for line in itertools.islice(fh, n):
        w.write(line)
PY
.venv/bin/sdr index --store "$STORE" "$SAMPLE"
.venv/bin/sdr info --store "$STORE"
FIRST=$(head -1 "$SAMPLE" | .venv/bin/python -c "import json,sys; print(json.loads(sys.stdin.readline())['id'])")
echo "== more like this: $FIRST"
.venv/bin/sdr mlt --store "$STORE" --id "$FIRST" --size 5 --explain
echo "demo: done in $(( $(date +%s) - start )) s (setup included)"
