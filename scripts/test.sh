#!/usr/bin/env bash
# The test command (README): unit + integration tiers; slow, gpu and cluster tiers are opt-in (-m slow / -m gpu /
# -m cluster: a local three-node cluster of scripts/opensearch-cluster.sh, which the tests start and stop).
# OpenSearch tests run against a real node: OPENSEARCH_URL when set; otherwise a node of
# scripts/opensearch-node.sh: one already running there is used and left running, else one is
# started (fetched from Maven Central on first use) and stopped again when the tests end.
# Redis for the worker tests: REDIS_URL when set, else the redis-server the test extra installs.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
NODE=./scripts/opensearch-node.sh
version() { curl -fsS "$1" | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["version"]["number"])'; }
if [ -n "${OPENSEARCH_URL:-}" ]; then
  echo "OpenSearch: $OPENSEARCH_URL ($(version "$OPENSEARCH_URL")), from OPENSEARCH_URL"
elif OPENSEARCH_URL=$("$NODE" url 2>/dev/null); then
  echo "OpenSearch: a node was already running at $OPENSEARCH_URL ($(version "$OPENSEARCH_URL")); the tests use it and leave it running"
else
  stop_node() {
    echo "OpenSearch: stopping the node this command started (port ${SDR_NODE_PORT:-9200})"
    "$NODE" stop || echo "OpenSearch: could not stop it; $NODE stop does" >&2
  }
  start=$(date +%s)
  trap stop_node EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  OPENSEARCH_URL=$("$NODE" start)
  echo "OpenSearch: started a node at $OPENSEARCH_URL ($(version "$OPENSEARCH_URL")) in $(( $(date +%s) - start )) s; it is stopped when the tests end"
fi
export OPENSEARCH_URL
.venv/bin/python -m pytest "$@"
