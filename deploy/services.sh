#!/usr/bin/env bash
# deploy/services.sh - start / stop a real single-node Apache Kafka broker (KRaft,
# combined broker+controller) and a real Redis server on this machine, without Docker.
#
#   bash deploy/services.sh up       # start what is missing, print env lines on stdout
#   bash deploy/services.sh status   # say which services are up (exit 0 only if both are)
#   bash deploy/services.sh down     # stop both, wipe Kafka's data
#
# `up` prints only the env lines on stdout (all progress goes to stderr), so
#   set -a; eval "$(bash deploy/services.sh up)"; set +a
# exports KAFKA_BOOTSTRAP_SERVERS and REDIS_URL into the calling shell.
#
# If KAFKA_BOOTSTRAP_SERVERS / REDIS_URL are already set, `up` does not start that
# service (the caller supplies it) and echoes the caller's value back.
# See deploy/README.md for every variable, port and path.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

KAFKA_VERSION=4.1.2
HOST=127.0.0.1
KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
REDIS_PORT="${REDIS_PORT:-6379}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms512m -Xmx1g}"
STOP_TIMEOUT="${STOP_TIMEOUT:-20}"

RW_CACHE="${RW_CACHE:-$HOME/.cache/reasonwire}"
KAFKA_HOME="$RW_CACHE/kafka-$KAFKA_VERSION"
KAFKA_LIBS="$KAFKA_HOME/libs"
KAFKA_POM="$SCRIPT_DIR/kafka/pom.xml"
KAFKA_LOG4J2="$SCRIPT_DIR/kafka/log4j2.xml"

RW_STATE="${RW_STATE:-/tmp/reasonwire-services}"
KAFKA_DIR="$RW_STATE/kafka"
KAFKA_DATA="$KAFKA_DIR/data"
KAFKA_LOGS="$KAFKA_DIR/logs"
KAFKA_CONF="$KAFKA_DIR/server.properties"
KAFKA_PID="$KAFKA_DIR/kafka.pid"
KAFKA_OUT="$KAFKA_DIR/kafka.out"
REDIS_DIR="$RW_STATE/redis"
REDIS_PID="$REDIS_DIR/redis.pid"
REDIS_LOG="$REDIS_DIR/redis.log"

log() { printf '[services] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# --------------------------------------------------------------------------- helpers

# port_open HOST PORT: true if something accepts TCP connections there.
port_open() {
    # shellcheck disable=SC2016  # $1/$2 expand in the child bash, on purpose
    timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

# pid_running PIDFILE PATTERN: true if the pid in PIDFILE is alive and its
# command line contains PATTERN (guards against a recycled pid).
pid_running() {
    local pidfile="$1" pattern="$2" pid
    [[ -s "$pidfile" ]] || return 1
    pid="$(tr -dc '0-9' <"$pidfile")"
    [[ -n "$pid" ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$pattern"
}

pid_of() { tr -dc '0-9' <"$1"; }

# stop_pid NAME PIDFILE PATTERN: SIGTERM, wait STOP_TIMEOUT s, then SIGKILL.
stop_pid() {
    local name="$1" pidfile="$2" pattern="$3" pid i
    if ! pid_running "$pidfile" "$pattern"; then
        log "$name: not running (no live pid file)"
        rm -f "$pidfile"
        return 0
    fi
    pid="$(pid_of "$pidfile")"
    log "$name: stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name: still alive after ${STOP_TIMEOUT}s, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    kill -0 "$pid" 2>/dev/null && die "$name: pid $pid would not exit"
    rm -f "$pidfile"
    log "$name: stopped"
}

APT_UPDATED=0
apt_install() {
    command -v apt-get >/dev/null || die "apt-get not available; install manually: $*"
    local sudo=()
    if [[ "$(id -u)" -ne 0 ]]; then
        command -v sudo >/dev/null || die "need root (or sudo) to install: $*"
        sudo=(sudo)
    fi
    if [[ "$APT_UPDATED" -eq 0 ]]; then
        log "apt-get update"
        "${sudo[@]}" apt-get update -qq >&2
        APT_UPDATED=1
    fi
    log "apt-get install $*"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "$@" >&2
}

ensure_java() {
    if ! command -v java >/dev/null; then
        apt_install openjdk-17-jre-headless
    fi
    local v
    v="$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
    [[ "${v%%.*}" =~ ^[0-9]+$ && "${v%%.*}" -ge 17 ]] \
        || die "Kafka $KAFKA_VERSION needs Java >= 17, found '${v:-unknown}'"
}

# ensure_kafka_libs: gather the broker's runtime classpath into $KAFKA_LIBS once.
# A stamp with the pom's sha256 marks a complete copy; later runs download nothing.
ensure_kafka_libs() {
    local stamp want tmp
    stamp="$KAFKA_HOME/.complete"
    want="$(sha256sum "$KAFKA_POM" | cut -d' ' -f1)"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d "$KAFKA_LIBS" ]]; then
        return 0
    fi
    command -v mvn >/dev/null || apt_install maven
    log "Kafka $KAFKA_VERSION: resolving runtime classpath with Maven into $KAFKA_LIBS (one-time)"
    mkdir -p "$KAFKA_HOME"
    tmp="$(mktemp -d "$KAFKA_HOME/libs.tmp.XXXXXX")"
    # sed: Debian's Maven 3.8 prints stray ANSI resets even in batch mode.
    if ! mvn -q -B -f "$KAFKA_POM" dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$tmp/libs" 2>&1 \
            | sed 's/\x1b\[[0-9;]*m//g' >&2; then
        rm -rf "$tmp"
        die "Maven could not gather the Kafka classpath (see output above)"
    fi
    [[ -f "$tmp/libs/kafka_2.13-$KAFKA_VERSION.jar" ]] \
        || { rm -rf "$tmp"; die "kafka_2.13-$KAFKA_VERSION.jar missing from Maven output"; }
    rm -rf "$KAFKA_LIBS"
    mv "$tmp/libs" "$KAFKA_LIBS"
    rmdir "$tmp"
    printf '%s\n' "$want" >"$stamp"
    log "Kafka $KAFKA_VERSION: $(find "$KAFKA_LIBS" -name '*.jar' | wc -l) jars cached"
}

# ---------------------------------------------------------------------------- redis

redis_up() {
    if [[ -n "${REDIS_URL:-}" ]]; then
        log "Redis: REDIS_URL is set by the caller ($REDIS_URL); not starting Redis"
        return 0
    fi
    if port_open "$HOST" "$REDIS_PORT"; then
        log "Redis: $HOST:$REDIS_PORT already listening; leaving it alone"
        return 0
    fi
    command -v redis-server >/dev/null || apt_install redis-server
    mkdir -p "$REDIS_DIR"
    rm -f "$REDIS_PID"
    log "Redis: starting on $HOST:$REDIS_PORT (state in $REDIS_DIR)"
    # AOF fsynced at every write: a terminal event is published only after its artefacts
    # are on disk (docs/reliability.md: durable artefacts; cost measured there).
    redis-server \
        --bind "$HOST" --port "$REDIS_PORT" --protected-mode yes \
        --appendonly yes --appendfsync always \
        --daemonize yes --dir "$REDIS_DIR" \
        --pidfile "$REDIS_PID" --logfile "$REDIS_LOG" >&2 9>&-
    local i
    for ((i = 0; i < 100; i++)); do
        port_open "$HOST" "$REDIS_PORT" && { log "Redis: up"; return 0; }
        sleep 0.1
    done
    tail -n 30 "$REDIS_LOG" >&2 2>/dev/null || true
    die "Redis did not start listening on $HOST:$REDIS_PORT"
}

redis_down() { stop_pid Redis "$REDIS_PID" redis-server; }

# ---------------------------------------------------------------------------- kafka

write_kafka_conf() {
    mkdir -p "$KAFKA_DATA" "$KAFKA_LOGS"
    cat >"$KAFKA_CONF" <<EOF
# Generated by deploy/services.sh - single-node KRaft (combined broker+controller).
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=$HOST:$KAFKA_CONTROLLER_PORT
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$KAFKA_DATA
num.partitions=4
auto.create.topics.enable=true
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
}

# kafka_cmd: fill KAFKA_CMD with the JVM command line (main class not included).
kafka_cmd() {
    local heap
    read -r -a heap <<<"$KAFKA_HEAP_OPTS"
    KAFKA_CMD=(java "${heap[@]}"
        -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
        -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true
        "-Dlog4j2.configurationFile=$KAFKA_LOG4J2" "-Dkafka.logs.dir=$KAFKA_LOGS"
        -cp "$KAFKA_LIBS/*")
}

kafka_format() {
    if [[ -f "$KAFKA_DATA/meta.properties" ]]; then
        log "Kafka: storage already formatted"
        return 0
    fi
    local cluster_id
    # 16 random bytes as unpadded base64url = the 22-char Kafka Uuid format.
    cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    log "Kafka: formatting storage (cluster id $cluster_id)"
    # --standalone: this node is the sole voter of a dynamic (KIP-853) quorum,
    # which pairs with controller.quorum.bootstrap.servers in server.properties.
    kafka_cmd
    "${KAFKA_CMD[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$KAFKA_CONF" --standalone >&2 \
        || die "kafka-storage format failed"
}

kafka_wait_started() {
    local pid="$1" deadline=$((SECONDS + KAFKA_START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            kafka_fail "Kafka exited during startup"
        fi
        if grep -qs "Kafka Server started" "$KAFKA_LOGS/server.log" \
                && port_open "$HOST" "$KAFKA_PORT"; then
            log "Kafka: ready (pid $pid, waited $((SECONDS - deadline + KAFKA_START_TIMEOUT))s)"
            return 0
        fi
        sleep 0.5
    done
    stop_pid Kafka "$KAFKA_PID" kafka.Kafka || true
    kafka_fail "Kafka did not log 'Kafka Server started' within ${KAFKA_START_TIMEOUT}s"
}

kafka_fail() {
    log "---- tail of $KAFKA_LOGS/server.log ----"
    tail -n 40 "$KAFKA_LOGS/server.log" >&2 2>/dev/null || true
    log "---- tail of $KAFKA_OUT ----"
    tail -n 20 "$KAFKA_OUT" >&2 2>/dev/null || true
    die "$1"
}

kafka_up() {
    if [[ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ]]; then
        log "Kafka: KAFKA_BOOTSTRAP_SERVERS is set by the caller ($KAFKA_BOOTSTRAP_SERVERS); not starting Kafka"
        return 0
    fi
    if pid_running "$KAFKA_PID" kafka.Kafka; then
        log "Kafka: already running (pid $(pid_of "$KAFKA_PID"))"
        kafka_wait_started "$(pid_of "$KAFKA_PID")"
        return 0
    fi
    if port_open "$HOST" "$KAFKA_PORT"; then
        log "Kafka: $HOST:$KAFKA_PORT already listening; leaving it alone"
        return 0
    fi
    if port_open "$HOST" "$KAFKA_CONTROLLER_PORT"; then
        die "Kafka: controller port $HOST:$KAFKA_CONTROLLER_PORT is taken by another process (set KAFKA_CONTROLLER_PORT)"
    fi
    ensure_java
    ensure_kafka_libs
    write_kafka_conf
    kafka_format
    # Fresh log files per start, so the readiness grep never sees an old run.
    rm -rf "$KAFKA_DIR/logs.prev"
    mv "$KAFKA_LOGS" "$KAFKA_DIR/logs.prev"
    mkdir -p "$KAFKA_LOGS"
    log "Kafka: starting broker on $HOST:$KAFKA_PORT (controller $HOST:$KAFKA_CONTROLLER_PORT, state in $KAFKA_DIR)"
    # setsid: own session, so a Ctrl-C / job-control kill of the caller leaves it
    # running. The inner bash writes its own pid and then execs the JVM (same pid).
    # 9>&- : do not let the daemon inherit the state-dir lock (see lock_state).
    rm -f "$KAFKA_PID"
    kafka_cmd
    (
        cd "$KAFKA_DIR"
        # shellcheck disable=SC2016  # $$/$1/$@ belong to the child bash
        setsid nohup bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$KAFKA_PID" \
            "${KAFKA_CMD[@]}" kafka.Kafka "$KAFKA_CONF" >"$KAFKA_OUT" 2>&1 </dev/null 9>&- &
    )
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -s "$KAFKA_PID" ]] && break
        sleep 0.05
    done
    [[ -s "$KAFKA_PID" ]] || kafka_fail "Kafka process did not start"
    kafka_wait_started "$(pid_of "$KAFKA_PID")"
}

kafka_down() {
    stop_pid Kafka "$KAFKA_PID" kafka.Kafka
    if port_open "$HOST" "$KAFKA_CONTROLLER_PORT" && [[ -d "$KAFKA_DATA" ]]; then
        log "Kafka: WARNING: something still listens on $HOST:$KAFKA_CONTROLLER_PORT; keeping $KAFKA_DATA"
        return 0
    fi
    rm -rf "$KAFKA_DATA" "$KAFKA_CONF"
    log "Kafka: data removed ($KAFKA_DATA)"
}

# -------------------------------------------------------------------------- commands

print_env() {
    printf 'KAFKA_BOOTSTRAP_SERVERS=%s\n' "${KAFKA_BOOTSTRAP_SERVERS:-$HOST:$KAFKA_PORT}"
    printf 'REDIS_URL=%s\n' "${REDIS_URL:-redis://$HOST:$REDIS_PORT/0}"
}

lock_state() {
    mkdir -p "$RW_STATE"
    exec 9>"$RW_STATE/.lock"
    flock -w 180 9 || die "another services.sh holds $RW_STATE/.lock"
}

cmd_up() {
    lock_state
    redis_up
    kafka_up
    print_env
}

cmd_down() {
    lock_state
    kafka_down
    redis_down
}

# status_one NAME PIDFILE PATTERN PORT SUPPLIED
status_one() {
    local name="$1" pidfile="$2" pattern="$3" port="$4" supplied="$5"
    if [[ -n "$supplied" ]]; then
        printf '%-6s supplied by caller: %s\n' "$name" "$supplied"
        return 0
    fi
    if pid_running "$pidfile" "$pattern" && port_open "$HOST" "$port"; then
        printf '%-6s up   pid %s on %s:%s\n' "$name" "$(pid_of "$pidfile")" "$HOST" "$port"
    elif pid_running "$pidfile" "$pattern"; then
        printf '%-6s starting/unhealthy: pid %s alive, %s:%s not listening\n' \
            "$name" "$(pid_of "$pidfile")" "$HOST" "$port"
        return 1
    elif port_open "$HOST" "$port"; then
        printf '%-6s up   on %s:%s (not started by this script)\n' "$name" "$HOST" "$port"
    else
        printf '%-6s down\n' "$name"
        return 1
    fi
}

cmd_status() {
    local rc=0
    status_one Kafka "$KAFKA_PID" kafka.Kafka "$KAFKA_PORT" "${KAFKA_BOOTSTRAP_SERVERS:-}" || rc=3
    status_one Redis "$REDIS_PID" redis-server "$REDIS_PORT" "${REDIS_URL:-}" || rc=3
    return "$rc"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    *)
        echo "usage: $0 up|down|status" >&2
        exit 2
        ;;
esac
