#!/usr/bin/env bash
# A local OpenSearch cluster of N nodes on 127.0.0.1, each a node of scripts/opensearch-node.sh (same
# cached distribution, k-NN and the sdr plugin on every node), for tests and for trying a cluster
# before real machines.
#
#   scripts/opensearch-cluster.sh start       # start every node, wait until the cluster is green; prints the URLs
#   scripts/opensearch-cluster.sh stop        # stop every node (data kept)
#   scripts/opensearch-cluster.sh restart     # stop, then start (same data)
#   scripts/opensearch-cluster.sh urls        # the nodes' URLs, comma-separated (SDR_OPENSEARCH_URL takes them)
#   scripts/opensearch-cluster.sh status      # the cluster's health and its nodes
#   scripts/opensearch-cluster.sh wipe        # stop every node and delete their data
#   scripts/opensearch-cluster.sh kill I      # SIGKILL node I (1..N): a machine lost
#   scripts/opensearch-cluster.sh freeze I    # SIGSTOP node I: a long GC pause or a hung machine
#   scripts/opensearch-cluster.sh thaw I      # SIGCONT node I
#   scripts/opensearch-cluster.sh revive I    # start node I again on its data; wait until it has joined
#   scripts/opensearch-cluster.sh pid I       # node I's JVM process id
#
# Environment (all optional; the SDR_NODE_* settings of scripts/opensearch-node.sh apply to every node):
#   SDR_CLUSTER_NODES  number of nodes (default 3)
#   SDR_CLUSTER_PORT   HTTP port of node 1 (default 9250); node I listens on PORT+I-1, transport +100
#   SDR_CLUSTER_HEAP   each node's JVM heap (default 768m: three nodes and the tests fit a 2-core,
#                      24 GiB machine)
#   SDR_CLUSTER_WAIT   seconds `start`/`revive` wait for the cluster (default 300)
#
# Every node is cluster-manager-eligible and holds data: the cluster is named sdr-cluster-<PORT>, its
# seed hosts are the nodes' transport ports and its initial cluster managers are the N node names, so
# it survives the loss of any one node of three (a majority of the managers remains). On real machines
# the same three settings are what changes from a single node (docs/opensearch.md, "A cluster").
set -euo pipefail

N=${SDR_CLUSTER_NODES:-3}
PORT=${SDR_CLUSTER_PORT:-9250}
WAIT=${SDR_CLUSTER_WAIT:-300}
[[ "$N" =~ ^[1-9][0-9]*$ ]] || { echo "opensearch-cluster: SDR_CLUSTER_NODES must be a positive integer, not '$N'" >&2; exit 2; }
[[ "$PORT" =~ ^[0-9]+$ ]] || { echo "opensearch-cluster: SDR_CLUSTER_PORT must be a port, not '$PORT'" >&2; exit 2; }
NODE_SCRIPT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/opensearch-node.sh"
PORTS=""
for ((i = 0; i < N; i++)); do PORTS="$PORTS${PORTS:+,}$((PORT + i))"; done
export SDR_NODE_CLUSTER=$PORTS SDR_NODE_HEAP=${SDR_CLUSTER_HEAP:-768m}

die() { echo "opensearch-cluster: $*" >&2; exit 1; }
log() { echo "opensearch-cluster: $*" >&2; }

node() {  # node I VERB: scripts/opensearch-node.sh VERB for node I
  SDR_NODE_PORT=$((PORT + $1 - 1)) "$NODE_SCRIPT" "$2"
}

index_of() {  # check I is a node number
  [[ "${1:-}" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le "$N" ] || die "a node number 1..$N is needed, not '${1:-}'"
}

urls() { local i out=""; for ((i = 0; i < N; i++)); do out="$out${out:+,}http://127.0.0.1:$((PORT + i))"; done; echo "$out"; }

pid_of() {  # the JVM's pid of node I (from the node script's pid file)
  local base run
  if [ "$(id -u)" -eq 0 ]; then base=/var/tmp/sdr-search/opensearch; else base=${XDG_CACHE_HOME:-$HOME/.cache}/sdr-search/opensearch; fi
  base=${SDR_NODE_DIR:-$base}
  run=$base/node-${SDR_NODE_VERSION:-2.19.1}-$((PORT + $1 - 1))
  cat "$run/opensearch.pid" 2>/dev/null || die "node $1 has no pid file in $run (not started?)"
}

health() {  # health QUERY: _cluster/health?QUERY from the first node that answers
  local i
  for ((i = 0; i < N; i++)); do
    curl -fsS -m 5 "http://127.0.0.1:$((PORT + i))/_cluster/health?$1" 2>/dev/null && return 0
  done
  return 1
}

wait_green() {  # wait_green NODES: until NODES nodes are in the cluster and it is green
  local deadline=$((SECONDS + WAIT)) out
  while [ $SECONDS -lt $deadline ]; do
    if out=$(health "wait_for_nodes=$1&wait_for_status=green&timeout=5s") && [[ "$out" == *'"timed_out":false'* ]]; then
      return 0
    fi
    sleep 1
  done
  die "the cluster at $(urls) did not reach green with $1 nodes in ${WAIT}s: $(health 'timeout=1s' || echo 'no node answers')"
}

start() {
  local i
  # The first node builds the distribution and the plugin once; the others reuse them.
  for ((i = 1; i <= N; i++)); do node "$i" start >/dev/null; done
  wait_green "$N"
  urls
}

stop() { local i; for ((i = 1; i <= N; i++)); do node "$i" stop; done; }

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  urls|url) urls ;;
  status) health "pretty" || die "no node of $(urls) answers"
    curl -fsS -m 5 "$(urls | cut -d, -f1)/_cat/nodes?v&h=name,ip,heap.percent,node.role,cluster_manager" 2>/dev/null || true ;;
  wipe) for ((i = 1; i <= N; i++)); do node "$i" wipe; done ;;
  kill) index_of "${2:-}"; kill -KILL "$(pid_of "$2")"; log "node $2 (port $((PORT + $2 - 1))) SIGKILLed" ;;
  freeze) index_of "${2:-}"; kill -STOP "$(pid_of "$2")"; log "node $2 (port $((PORT + $2 - 1))) frozen (SIGSTOP)" ;;
  thaw) index_of "${2:-}"; kill -CONT "$(pid_of "$2")"; log "node $2 (port $((PORT + $2 - 1))) thawed (SIGCONT)" ;;
  revive) index_of "${2:-}"; node "$2" start >/dev/null; wait_green "$N"; log "node $2 is back; the cluster is green" ;;
  pid) index_of "${2:-}"; pid_of "$2" ;;
  *) echo "usage: $0 start|stop|restart|urls|status|wipe|kill I|freeze I|thaw I|revive I|pid I" >&2; exit 2 ;;
esac
