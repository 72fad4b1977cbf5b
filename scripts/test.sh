#!/usr/bin/env bash
# The test command (README): unit + integration tiers; slow and gpu tiers are opt-in (-m slow / -m gpu).
# OpenSearch tests run against a real node: OPENSEARCH_URL when set, otherwise the local node of
# scripts/opensearch-node.sh (fetched from Maven Central on first use, then started; it keeps running).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ -z "${OPENSEARCH_URL:-}" ]; then
  OPENSEARCH_URL=$(./scripts/opensearch-node.sh start)
  export OPENSEARCH_URL
fi
echo "OpenSearch: $OPENSEARCH_URL ($(curl -fsS "$OPENSEARCH_URL" | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["version"]["number"])'))"
exec .venv/bin/python -m pytest "$@"
