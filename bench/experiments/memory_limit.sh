#!/usr/bin/env bash
# Queries under a memory limit (docs/results/scale.md, "Memory: what fits" and "Under a memory limit"):
# the query process (embedded) or the node (OpenSearch) runs in a cgroup v1 memory group whose limit
# includes the page cache, so a store larger than the limit must read from disk what is not cached.
#
#   bench/experiments/memory_limit.sh embedded STORE COPIES [LIMIT_MIB ...]   # default limits: none 3400 2600
#   bench/experiments/memory_limit.sh node [ALLOWANCE_MIB ...]                # default: none 400 150 60
#
# embedded: STORE is a store grown by bench/scale.py (sq8), COPIES its copy count (scale.py's --copies);
#   every run starts cold (the store's files dropped from the cache with posix_fadvise DONTNEED) and runs
#   scale.py's query phase (30 by id, 30 by text). SDR_STORE_HIT_SCORES=codes in the environment is passed on.
# node: starts a node (port 9350, heap 1g) inside the group, writes the 0.1M-sentence scale index twice
#   (k-NN encoder none and sq) through it, force-merges both, then for each allowance sets the limit to the
#   node's anonymous memory plus it and runs the query phase on both indices (20 by id, 20 by text).
# Needs root and a writable /sys/fs/cgroup/memory (cgroup v1); output in $OUT (default /tmp/sdr-memory-limit).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
OUT=${OUT:-/tmp/sdr-memory-limit}
CGROOT=/sys/fs/cgroup/memory
[ -w "$CGROOT" ] || { echo "needs a writable cgroup v1 memory controller at $CGROOT" >&2; exit 2; }
mkdir -p "$OUT"
cd "$ROOT"

summary() {  # the query phase's JSON line -> one line
  tail -1 "$1" | "$PY" -c "import json,sys; q=json.loads(sys.stdin.read()); i=q['by_id']; t=q['by_text']; m=q.get('memory',{}); print('  by id p50/p99 %.0f/%.0f candidates %.0f prerank %.0f rerank %.0f; by text p50/p99 %.0f/%.0f; fidelity %s; memory %s' % (i['total']['p50'], i['total']['p99'], i['candidates']['p50'], i['prerank']['p50'], i['rerank']['p50'], t['total']['p50'], t['total']['p99'], q.get('fidelity'), m))" \
    || tail -3 "$1"
}

embedded() {
  local store=$1 copies=$2; shift 2
  local cg=$CGROOT/sdr-embedded-limit
  mkdir -p "$cg"
  [ $# -gt 0 ] || set -- none 3400 2600
  for lim in "$@"; do
    echo -1 > "$cg/memory.limit_in_bytes"
    [ "$lim" != none ] && echo $((lim * 1048576)) > "$cg/memory.limit_in_bytes"
    "$PY" -c "
import os
for f in os.listdir('$store'):
    p = os.path.join('$store', f)
    if os.path.isfile(p):
        fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)"
    local log=$OUT/embedded-$lim-${SDR_STORE_HIT_SCORES:-exact}.log
    ( echo $BASHPID > "$cg/cgroup.procs"
      exec "$PY" bench/scale.py --phase query --copies "$copies" --store "$store" --codes sq8 --queries 30 \
        --fidelity-queries "$([ "$lim" = none ] && echo 6 || echo 0)" ) > "$log" 2>&1
    echo "limit $lim MiB, hit scores ${SDR_STORE_HIT_SCORES:-exact}: exit $?, failcnt $(cat "$cg/memory.failcnt")"
    summary "$log"
  done
  echo -1 > "$cg/memory.limit_in_bytes"
}

node() {
  local cg=$CGROOT/sdr-node-limit port=9350
  mkdir -p "$cg"
  echo -1 > "$cg/memory.limit_in_bytes"
  export SDR_NODE_PORT=$port SDR_NODE_HEAP=1g
  scripts/opensearch-node.sh wipe >/dev/null 2>&1 || true
  ( echo $BASHPID > "$cg/cgroup.procs"; exec setsid scripts/opensearch-node.sh start ) || exit 1
  local pid; pid=$(scripts/opensearch-node.sh pid)
  for enc in none sq; do
    "$PY" bench/scale.py --node "http://127.0.0.1:$port" --node-index "limit-$enc" --node-encoder "$enc" --node-pid "$pid" \
      --sizes 1e5 --queries 20 --fidelity-queries 5 > "$OUT/node-grow-$enc.log" 2>&1
    curl -s -XPOST "127.0.0.1:$port/limit-$enc/_forcemerge?max_num_segments=1" >/dev/null
  done
  curl -s -XPOST "127.0.0.1:$port/limit-*/_refresh" >/dev/null
  local anon; anon=$(awk '/RssAnon/ {print $2 * 1024}' "/proc/$pid/status")
  echo "node $pid: anonymous memory $((anon / 1048576)) MiB"
  [ $# -gt 0 ] || set -- none 400 150 60
  for extra in "$@"; do
    echo -1 > "$cg/memory.limit_in_bytes"
    [ "$extra" != none ] && echo $((anon + extra * 1048576)) > "$cg/memory.limit_in_bytes"
    for enc in none sq; do
      local r0 r1 log=$OUT/node-$extra-$enc.log
      r0=$(awk '/^read_bytes/ {print $2}' "/proc/$pid/io")
      timeout 900 "$PY" bench/scale.py --phase query --copies 3 --node "http://127.0.0.1:$port" --node-index "limit-$enc" \
        --node-encoder "$enc" --node-pid "$pid" --queries 20 --fidelity-queries 0 > "$log" 2>&1
      r1=$(awk '/^read_bytes/ {print $2}' "/proc/$pid/io")
      echo "page cache allowance $extra MiB, encoder $enc: disk read $(((r1 - r0) / 1048576)) MiB, node $(kill -0 "$pid" 2>/dev/null && echo alive || echo DEAD)"
      summary "$log"
    done
  done
  echo -1 > "$cg/memory.limit_in_bytes"
  scripts/opensearch-node.sh stop
}

case "${1:-}" in
  embedded) shift; [ $# -ge 2 ] || { echo "usage: $0 embedded STORE COPIES [LIMIT_MIB ...]" >&2; exit 2; }; embedded "$@" ;;
  node) shift; node "$@" ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
