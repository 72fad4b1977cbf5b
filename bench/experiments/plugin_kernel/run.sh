#!/usr/bin/env bash
# The plugin's exact SDR kernel in a plain JVM (KernelBench.java), once per JDK given (default: every JDK of
# /usr/lib/jvm that has javac), against the plugin jar built for OpenSearch 2.19.1 by scripts/opensearch-node.sh
# (or `mvn -f opensearch-plugin/pom.xml package -Dopensearch.version=2.19.1 -DskipTests`).
#
#   bench/experiments/plugin_kernel/run.sh [JAVA_HOME ...]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
JAR=${SDR_PLUGIN_JAR:-$ROOT/opensearch-plugin/target/os-2.19.1/sdr-opensearch-plugin-2.19.1.jar}
[ -f "$JAR" ] || { echo "no plugin jar at $JAR: build it first (see the comment above)" >&2; exit 1; }
M2=${HOME}/.m2/repository
CP="$JAR"
for dep in org/apache/lucene/lucene-core/9.12.1 org/opensearch/opensearch-core/2.19.1 org/opensearch/opensearch/2.19.1 \
           org/opensearch/opensearch-common/2.19.1; do
  CP="$CP:$(ls "$M2/$dep"/*.jar | grep -v sources | head -1)"
done
CP="$CP:$(find "$M2/org/apache/logging/log4j/log4j-api" -name '*.jar' | head -1)"
homes=("$@")
if [ ${#homes[@]} -eq 0 ]; then
  for j in /usr/lib/jvm/*; do [ -x "$j/bin/javac" ] && [ ! -L "$j" ] && homes+=("$j"); done
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
"${homes[0]}/bin/javac" --release 17 --add-modules jdk.incubator.vector -cp "$CP" -d "$OUT" "$HERE/KernelBench.java" 2>&1 \
  | grep -v -e '^warning' -e 'incubating' -e '^[0-9]* warnings\?$' || true
for j in "${homes[@]}"; do
  printf '%s: ' "$("$j/bin/java" -version 2>&1 | head -1)"
  "$j/bin/java" --add-modules jdk.incubator.vector -Dlog4j2.level=OFF -cp "$OUT:$CP" org.sdrsearch.opensearch.KernelBench 2>&1 \
    | grep -v -e WARNING -e StatusLogger
done
