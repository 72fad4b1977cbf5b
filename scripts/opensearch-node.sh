#!/usr/bin/env bash
# A local OpenSearch node without Docker: fetched from Maven Central, cached, started on 127.0.0.1.
#
#   scripts/opensearch-node.sh start   # fetch (once), install, start; prints the node's URL
#   scripts/opensearch-node.sh stop    # stop the node started by this script
#   scripts/opensearch-node.sh restart # stop, then start the same node (same data)
#   scripts/opensearch-node.sh url     # print the URL (exit 1 when the node does not answer)
#   scripts/opensearch-node.sh pid     # print the node's process id (to SIGSTOP / SIGCONT it)
#   scripts/opensearch-node.sh status  # version, plugins (k-NN, sdr), engines this node can run
#   scripts/opensearch-node.sh wipe    # stop and delete the node's data (the download cache stays)
#
# Environment (all optional):
#   SDR_NODE_VERSION   OpenSearch version (default 2.19.1; 3.x needs Java 21+). The k-NN plugin
#                      <version>.0 must exist on Maven Central (2.19.1.0 and 3.5.0.0 do).
#   SDR_NODE_PORT      HTTP port (default 9200; transport = port + 100)
#   SDR_NODE_HEAP      JVM heap (default 1g)
#   SDR_NODE_DIR       where the node lives (default ~/.cache/sdr-search/opensearch, or
#                      /var/tmp/sdr-search/opensearch when run as root)
#   SDR_NODE_JAVA_HOME the JDK to run it with (default: the first of JAVA_HOME, the java on PATH,
#                      /usr/lib/jvm/* that fits: Java 17-23 for 2.x, Java 21+ for 3.x)
#   SDR_NODE_ARGS      extra -E settings, e.g. "-E thread_pool.write.queue_size=2"
#   SDR_NODE_CLUSTER   the HTTP ports of every node of a local cluster this node belongs to, comma-separated
#                      (e.g. 9250,9251,9252; scripts/opensearch-cluster.sh sets it): instead of a single-node
#                      cluster, the node joins cluster sdr-cluster-<first port> with discovery.seed_hosts and
#                      cluster.initial_cluster_manager_nodes naming those nodes, and `start` returns once the
#                      node's process runs (a cluster cannot answer before a majority of its nodes is up).
#   SDR_NODE_HEAP_DUMP 1 (default): a JVM that runs out of memory writes its heap dump to the node's own
#                      log directory, <run dir>/logs/heap-dump.hprof (one file: the JVM never overwrites
#                      it, so there is at most one dump, of about the heap's size; delete it to let a later
#                      crash write its own; `wipe` deletes it with the node). 0: no heap dump. (OpenSearch's
#                      own jvm.options would write java_pid<pid>.hprof files into ./data of the directory
#                      the node was started from, one per crash.)
#   SDR_NODE_PLUGIN    1 (default): build the project's OpenSearch plugin (opensearch-plugin/, the exact
#                      SDR rescorer) with Maven for this version and install it; 0: a node without it
#                      (the engine's fallback path). The build is cached: it reruns (with its Java
#                      tests) only when opensearch-plugin/ changed. A node already running with another
#                      plugin state is left as it is, with a warning: `restart` loads the current one.
#
# What it assembles: the minimal distribution (org.opensearch.distribution.integ-test-zip:opensearch,
# zip, no bundled JDK), the modules the project's mapping needs (analysis-common for the pattern
# tokenizer and stop filter, lang-painless which k-NN extends), and the k-NN plugin
# (org.opensearch.plugin:opensearch-knn), and unless SDR_NODE_PLUGIN=0 the sdr plugin built from
# opensearch-plugin/ (into a copy of that home, opensearch-<version>-sdr-<hash of its sources>, so a
# node without it can run from the same cache). The Maven copy of k-NN carries no native (JNI) libraries:
# on such a node only the Lucene k-NN engine works (SDR_OPENSEARCH_ENGINE=lucene, the default);
# a write into a faiss or nmslib index makes the node exit.
#
# OpenSearch refuses to run as root: as root, the node runs as the system user sdr-opensearch.
set -euo pipefail

VERSION=${SDR_NODE_VERSION:-2.19.1}
PORT=${SDR_NODE_PORT:-9200}
HEAP=${SDR_NODE_HEAP:-1g}
if [ "$(id -u)" -eq 0 ]; then
  DEFAULT_DIR=/var/tmp/sdr-search/opensearch
else
  DEFAULT_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/sdr-search/opensearch
fi
BASE=${SDR_NODE_DIR:-$DEFAULT_DIR}
HOME_DIR=$BASE/opensearch-$VERSION
RUN_DIR=$BASE/node-$VERSION-$PORT
PID_FILE=$RUN_DIR/opensearch.pid
URL=http://127.0.0.1:$PORT
NODE_USER=sdr-opensearch
PLUGIN=${SDR_NODE_PLUGIN:-1}
case "$PLUGIN" in 0|1) ;; *) echo "opensearch-node: SDR_NODE_PLUGIN must be 0 or 1, not '$PLUGIN'" >&2; exit 2 ;; esac
HEAP_DUMP=${SDR_NODE_HEAP_DUMP:-1}
case "$HEAP_DUMP" in 0|1) ;; *) echo "opensearch-node: SDR_NODE_HEAP_DUMP must be 0 or 1, not '$HEAP_DUMP'" >&2; exit 2 ;; esac
PLUGIN_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/opensearch-plugin
CLUSTER=${SDR_NODE_CLUSTER:-}
if [ -n "$CLUSTER" ]; then
  [[ "$CLUSTER" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "opensearch-node: SDR_NODE_CLUSTER must be HTTP ports separated by commas, not '$CLUSTER'" >&2; exit 2; }
  [[ ",$CLUSTER," == *",$PORT,"* ]] || { echo "opensearch-node: SDR_NODE_CLUSTER ($CLUSTER) does not list this node's port $PORT" >&2; exit 2; }
  CLUSTER_NAME=sdr-cluster-${CLUSTER%%,*}
else
  CLUSTER_NAME=sdr-local
fi

die() { echo "opensearch-node: $*" >&2; exit 1; }
log() { echo "opensearch-node: $*" >&2; }

major() { echo "${1%%.*}"; }

java_major() {  # the major version of $1/bin/java, or 0
  local v
  v=$("$1/bin/java" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}') || true
  [ -n "$v" ] || { echo 0; return; }
  v=${v#1.}
  echo "${v%%[.+-]*}"
}

find_java() {
  # 2.x runs on Java 17-23 (it needs the security manager, gone in Java 24); 3.x needs Java 21+.
  local lo=17 hi=23 cand v
  if [ "$(major "$VERSION")" -ge 3 ]; then lo=21; hi=99; fi
  local path_java=""
  if command -v java >/dev/null 2>&1; then
    path_java=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
  fi
  for cand in ${SDR_NODE_JAVA_HOME:-} ${JAVA_HOME:-} $path_java /usr/lib/jvm/temurin-25-jdk-amd64 /usr/lib/jvm/*; do
    [ -x "$cand/bin/java" ] || continue
    v=$(java_major "$cand")
    if [ "$v" -ge "$lo" ] && [ "$v" -le "$hi" ]; then echo "$cand"; return; fi
  done
  die "OpenSearch $VERSION needs Java $lo-$hi; none found (set SDR_NODE_JAVA_HOME to a JDK)"
}

mvn_copy() {  # mvn_copy GROUP:ARTIFACT:VERSION[:TYPE] DIR
  mvn -q -B dependency:copy -Dartifact="$1" -DoutputDirectory="$2" -Dmdep.overWriteIfNewer=true >"$BASE/mvn.log" 2>&1 \
    || die "could not fetch $1 from Maven Central (see $BASE/mvn.log): $(grep -m1 -E 'ERROR' "$BASE/mvn.log" || true)"
}

write_descriptor() {  # write_descriptor DIR NAME CLASSNAME EXTENDS DESCRIPTION
  cat >"$1/plugin-descriptor.properties" <<EOF
description=$5
version=$VERSION
name=$2
classname=$3
java.version=11
opensearch.version=$VERSION
extended.plugins=$4
has.native.controller=false
EOF
}

assemble() {  # fetch the artifacts and build $HOME_DIR once
  [ -f "$HOME_DIR/.sdr-assembled" ] && return
  command -v mvn >/dev/null 2>&1 || die "Maven (mvn) is needed to fetch OpenSearch from Maven Central (apt-get install maven)"
  command -v unzip >/dev/null 2>&1 || die "unzip is needed (apt-get install unzip)"
  local dl=$BASE/download-$VERSION java_home
  java_home=$(find_java)
  mkdir -p "$dl"
  log "fetching OpenSearch $VERSION and k-NN $VERSION.0 from Maven Central"
  mvn_copy "org.opensearch.distribution.integ-test-zip:opensearch:$VERSION:zip" "$dl"
  mvn_copy "org.opensearch.plugin:opensearch-knn:$VERSION.0:zip" "$dl"
  mvn_copy "org.opensearch.plugin:analysis-common:$VERSION" "$dl/analysis-common"
  # lang-painless with its runtime dependencies (antlr, asm, the painless SPI), opensearch core excluded.
  cat >"$dl/painless-pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>local.sdr</groupId><artifactId>painless-module</artifactId><version>1</version>
<dependencies><dependency><groupId>org.opensearch.plugin</groupId><artifactId>lang-painless</artifactId>
<version>$VERSION</version><exclusions><exclusion><groupId>org.opensearch</groupId><artifactId>*</artifactId>
</exclusion></exclusions></dependency></dependencies></project>
EOF
  mvn -q -B -f "$dl/painless-pom.xml" dependency:copy-dependencies -DoutputDirectory="$dl/lang-painless" \
    -DincludeScope=runtime >"$BASE/mvn.log" 2>&1 || die "could not fetch lang-painless $VERSION (see $BASE/mvn.log)"
  # The painless SPI is in group org.opensearch.plugin, so it survives the exclusion above.
  ls "$dl/lang-painless"/opensearch-scripting-painless-spi-*.jar >/dev/null 2>&1 \
    || mvn_copy "org.opensearch.plugin:opensearch-scripting-painless-spi:$VERSION" "$dl/lang-painless"

  local tmp=$BASE/.assemble-$$
  rm -rf "$tmp" && mkdir -p "$tmp"
  unzip -q "$dl/opensearch-$VERSION.zip" -d "$tmp"
  local home=$tmp/opensearch-$VERSION
  # The 2.x integ-test zip has only transport-netty4; later ones ship every module. Add what is missing.
  if [ ! -d "$home/modules/lang-painless" ]; then
    mkdir -p "$home/modules/lang-painless"
    cp "$dl"/lang-painless/*.jar "$home/modules/lang-painless/"
    write_descriptor "$home/modules/lang-painless" lang-painless org.opensearch.painless.PainlessPlugin "" \
      "Painless scripting language"
    printf 'grant {\n  permission java.lang.RuntimePermission "createClassLoader";\n  permission java.lang.RuntimePermission "getClassLoader";\n};\n' \
      >"$home/modules/lang-painless/plugin-security.policy"
  fi
  if [ ! -d "$home/modules/analysis-common" ]; then
    mkdir -p "$home/modules/analysis-common"
    cp "$dl"/analysis-common/*.jar "$home/modules/analysis-common/"
    write_descriptor "$home/modules/analysis-common" analysis-common org.opensearch.analysis.common.CommonAnalysisPlugin \
      lang-painless "Common analysis components"
  fi
  OPENSEARCH_JAVA_HOME=$java_home "$home/bin/opensearch-plugin" install --batch \
    "file://$dl/opensearch-knn-$VERSION.0.zip" >"$BASE/plugin.log" 2>&1 \
    || die "installing the k-NN plugin failed (see $BASE/plugin.log)"
  touch "$home/.sdr-assembled"
  rm -rf "$HOME_DIR"
  mv "$home" "$HOME_DIR"
  rm -rf "$tmp"
}

plugin_hash() {  # a hash of the plugin's sources (pom.xml, src/) and the node version: its build's identity
  [ -f "$PLUGIN_SRC/pom.xml" ] || die "SDR_NODE_PLUGIN=1 but $PLUGIN_SRC/pom.xml is missing (set SDR_NODE_PLUGIN=0 for a node without the plugin)"
  { echo "$VERSION"; cd "$PLUGIN_SRC" && find pom.xml src -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; } \
    | sha256sum | cut -c1-12
}

node_home() {  # the home a node of these settings runs from: the bare one, or its copy with the sdr plugin
  if [ "$PLUGIN" = 1 ]; then echo "$HOME_DIR-sdr-$(plugin_hash)"; else echo "$HOME_DIR"; fi
}

build_plugin() {  # build_plugin ZIP: build the plugin for $VERSION with Maven (and its tests) into ZIP, once per source hash
  local zip=$1 java_home
  [ -f "$zip" ] && return
  command -v mvn >/dev/null 2>&1 || die "Maven (mvn) is needed to build the sdr plugin (apt-get install maven), or set SDR_NODE_PLUGIN=0"
  java_home=$(find_java)
  [ -x "$java_home/bin/javac" ] || die "building the sdr plugin needs a JDK with javac; $java_home has none (set SDR_NODE_JAVA_HOME)"
  log "building the sdr plugin for OpenSearch $VERSION (Maven, with its tests; once per change of opensearch-plugin/)"
  mkdir -p "$(dirname "$zip")"
  JAVA_HOME=$java_home MAVEN_OPTS="${MAVEN_OPTS:-} $( [ "$(java_major "$java_home")" -ge 24 ] && echo --sun-misc-unsafe-memory-access=allow)" \
    mvn -q -B -f "$PLUGIN_SRC/pom.xml" package -Dopensearch.version="$VERSION" >"$BASE/plugin-build.log" 2>&1 \
    || die "building the sdr plugin failed (see $BASE/plugin-build.log): $(grep -m3 -E 'ERROR|FAIL' "$BASE/plugin-build.log" || true)"
  cp "$PLUGIN_SRC/target/os-$VERSION/sdr-opensearch-plugin-$VERSION.zip" "$zip.tmp" && mv "$zip.tmp" "$zip"
  log "built the sdr plugin for $VERSION; its Java tests: $(cat "$PLUGIN_SRC/target/os-$VERSION"/surefire-reports/*.txt 2>/dev/null \
    | awk '/Tests run:/ {gsub(",", ""); r += $3; f += $5; e += $7; s += $9} END {printf "%d run, %d failed, %d errors, %d skipped", r, f, e, s}')"
}

assemble_plugin() {  # the sdr home of the current sources: a copy of $HOME_DIR with the plugin installed
  local home hash zip tmp java_home
  home=$(node_home)
  [ -f "$home/.sdr-plugin" ] && return  # written last: the home is complete
  if command -v flock >/dev/null 2>&1; then  # one build and install at a time (nodes on other ports share them)
    exec 9>"$BASE/.sdr-plugin.lock"
    flock 9
    [ -f "$home/.sdr-plugin" ] && { exec 9>&-; return; }
  fi
  hash=$(plugin_hash)
  zip=$BASE/sdr-plugin/sdr-opensearch-plugin-$VERSION-$hash.zip
  build_plugin "$zip"
  java_home=$(find_java)
  tmp=$BASE/.assemble-sdr-$$
  rm -rf "$tmp" && cp -a "$HOME_DIR" "$tmp"
  OPENSEARCH_JAVA_HOME=$java_home "$tmp/bin/opensearch-plugin" install --batch "file://$zip" >"$BASE/plugin.log" 2>&1 \
    || { rm -rf "$tmp"; die "installing the sdr plugin failed (see $BASE/plugin.log): $(tail -3 "$BASE/plugin.log")"; }
  echo "$hash" >"$tmp/.sdr-plugin"
  rm -rf "$home"
  mv "$tmp" "$home"
  prune_plugin_homes "$home"
  exec 9>&-
}

prune_plugin_homes() {  # delete sdr homes of older builds of this version that no running node of this script uses
  local keep=$1 old run pid used
  for old in "$HOME_DIR"-sdr-*; do
    [ -d "$old" ] && [ "$old" != "$keep" ] || continue
    used=0
    for run in "$BASE"/node-"$VERSION"-*; do
      [ "$(cat "$run/home" 2>/dev/null)" = "$old" ] || continue
      pid=$(cat "$run/opensearch.pid" 2>/dev/null) || continue
      [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && used=1
    done
    [ "$used" = 1 ] || rm -rf "$old"
  done
}

answers() { curl -fsS -m 2 "$URL" >/dev/null 2>&1; }

has_sdr_plugin() { curl -fsS -m 5 "$URL/_cat/plugins?h=component" 2>/dev/null | grep -qx 'sdr'; }

check_running_plugin() {  # start on a running node: say so when its plugin state is not the one asked for
  local wanted running
  wanted=$(node_home)
  running=$(cat "$RUN_DIR/home" 2>/dev/null || echo "$HOME_DIR")
  if [ "$wanted" != "$running" ]; then
    if [ "$PLUGIN" = 1 ] && has_sdr_plugin; then
      log "warning: the node at $URL runs an older build of the sdr plugin; '$0 restart' loads the current one"
    elif [ "$PLUGIN" = 1 ]; then
      log "warning: the node at $URL runs without the sdr plugin; '$0 restart' adds it"
    else
      log "warning: the node at $URL runs with the sdr plugin although SDR_NODE_PLUGIN=0; '$0 restart' removes it"
    fi
  fi
}

running_pid() {
  [ -f "$PID_FILE" ] || return 1
  local pid
  pid=$(cat "$PID_FILE" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

start() {
  command -v curl >/dev/null 2>&1 || die "curl is needed"
  if running_pid >/dev/null && answers; then check_running_plugin; echo "$URL"; return; fi
  if answers; then die "port $PORT already answers but not with a node of this script (set SDR_NODE_PORT)"; fi
  mkdir -p "$BASE"
  assemble
  [ "$PLUGIN" = 1 ] && assemble_plugin
  local java_home home
  java_home=$(find_java)
  home=$(node_home)
  mkdir -p "$RUN_DIR/data" "$RUN_DIR/logs"
  local runner=()
  if [ "$(id -u)" -eq 0 ]; then
    id "$NODE_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$NODE_USER"
    chown -R "$NODE_USER" "$home" "$RUN_DIR"
    chmod o+x "$BASE" "$(dirname "$BASE")" 2>/dev/null || true
    runner=(runuser -u "$NODE_USER" --)
  fi
  rm -f "$PID_FILE"
  echo "$home" >"$RUN_DIR/home"
  # Data written by a node of another layout (single node, or a cluster of other ports) would keep this
  # one out of its cluster (another cluster UUID): a local node's data follows the layout asked for.
  if [ "$(cat "$RUN_DIR/layout" 2>/dev/null || echo "${CLUSTER:+none}")" != "$CLUSTER" ] \
      && [ -n "$(ls -A "$RUN_DIR/data" 2>/dev/null)" ]; then
    log "the data in $RUN_DIR/data belongs to another layout than '${CLUSTER:-single node}': starting this node afresh"
    rm -rf "$RUN_DIR/data" && mkdir -p "$RUN_DIR/data"
    [ "$(id -u)" -eq 0 ] && chown "$NODE_USER" "$RUN_DIR/data"
  fi
  echo "$CLUSTER" >"$RUN_DIR/layout"
  # The sdr plugin's fast kernel uses the JDK's vector API; OpenSearch's jvm.options adds the module on
  # Java 20+ only, so a 2.x node on Java 17 gets it here (without it the plugin falls back to its scalar kernel).
  local vector_opts=""
  if [ "$PLUGIN" = 1 ] && [ "$(java_major "$java_home")" -lt 20 ]; then vector_opts="--add-modules=jdk.incubator.vector"; fi
  # A crash's files go to the node's own log directory, bounded (SDR_NODE_HEAP_DUMP above), not into the
  # directory the node was started from; these options come after jvm.options' and so replace them.
  local dump=$RUN_DIR/logs/heap-dump.hprof crash_opts
  crash_opts="-XX:ErrorFile=$RUN_DIR/logs/hs_err_pid%p.log"
  if [ "$HEAP_DUMP" = 1 ]; then
    crash_opts="$crash_opts -XX:+HeapDumpOnOutOfMemoryError -XX:HeapDumpPath=$dump"
    [ -e "$dump" ] && log "warning: $dump (a heap dump of an earlier crash) is kept; the node writes no other until it is deleted"
  else
    crash_opts="$crash_opts -XX:-HeapDumpOnOutOfMemoryError"
  fi
  local discovery="-E discovery.type=single-node" p seeds="" managers=""
  if [ -n "$CLUSTER" ]; then
    for p in ${CLUSTER//,/ }; do
      seeds="$seeds${seeds:+,}127.0.0.1:$((p + 100))"
      managers="$managers${managers:+,}sdr-local-$p"
    done
    discovery="-E discovery.seed_hosts=$seeds -E cluster.initial_cluster_manager_nodes=$managers"
  fi
  # shellcheck disable=SC2086
  "${runner[@]}" env OPENSEARCH_JAVA_HOME="$java_home" OPENSEARCH_PATH_CONF="$home/config" \
    OPENSEARCH_JAVA_OPTS="-Xms$HEAP -Xmx$HEAP $vector_opts $crash_opts ${OPENSEARCH_JAVA_OPTS:-}" \
    "$home/bin/opensearch" -d -p "$PID_FILE" \
    -E cluster.name=$CLUSTER_NAME -E node.name=sdr-local-$PORT $discovery \
    -E network.host=127.0.0.1 -E http.port="$PORT" -E transport.port=$((PORT + 100)) \
    -E path.data="$RUN_DIR/data" -E path.logs="$RUN_DIR/logs" \
    -E cluster.routing.allocation.disk.threshold_enabled=false \
    -E action.destructive_requires_name=false ${SDR_NODE_ARGS:-} >"$RUN_DIR/start.log" 2>&1 \
    || die "the node did not start: $(tail -5 "$RUN_DIR/start.log")"
  local i
  if [ -n "$CLUSTER" ]; then  # the cluster's script waits for the cluster; here, only for the process
    for i in $(seq 60); do running_pid >/dev/null && { echo "$URL"; return; }; sleep 1; done
    die "the node at $URL did not start: $(tail -5 "$RUN_DIR/start.log")"
  fi
  for i in $(seq 180); do
    if curl -fsS -m 2 "$URL/_cluster/health?wait_for_status=yellow&timeout=1s" >/dev/null 2>&1; then
      echo "$URL"
      return
    fi
    running_pid >/dev/null || [ "$i" -lt 60 ] || break  # the pid file can lag under load
    sleep 1
  done
  die "the node at $URL did not come up; last log lines:
$(tail -20 "$RUN_DIR/logs/$CLUSTER_NAME.log" 2>/dev/null || tail -20 "$RUN_DIR/start.log")"
}

stop() {
  local pid i
  if pid=$(running_pid); then
    kill "$pid"
    for i in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$PID_FILE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  url) answers || die "no node answers at $URL"; echo "$URL" ;;
  pid) running_pid || die "no node of this script runs on port $PORT" ;;
  status)
    answers || die "no node answers at $URL"
    curl -fsS "$URL/_cat/plugins?h=component,version"
    echo "k-NN engines: lucene$(ls "$HOME_DIR"/plugins/opensearch-knn/lib*/ 2>/dev/null | grep -q faiss && echo ', faiss')"
    if has_sdr_plugin; then
      running=$(cat "$RUN_DIR/home" 2>/dev/null || true)
      built=$(cat "$running/.sdr-plugin" 2>/dev/null || echo unknown)
      current=$( [ -f "$PLUGIN_SRC/pom.xml" ] && plugin_hash || echo unknown)
      if [ "$built" = "$current" ]; then note="current sources"; else note="sources now at $current: restart to load them"; fi
      echo "sdr plugin: installed (build $built; $note)"
    else
      echo "sdr plugin: not installed (SDR_NODE_PLUGIN=0, or a node started without it)"
    fi
    ;;
  wipe) stop; rm -rf "$RUN_DIR" ;;
  *) echo "usage: $0 start|stop|restart|url|pid|status|wipe" >&2; exit 2 ;;
esac
