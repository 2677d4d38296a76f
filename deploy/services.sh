#!/usr/bin/env bash
# deploy/services.sh - start / stop a real single-node Apache Kafka broker (KRaft,
# combined broker+controller) and a real Redis server on this machine, without Docker.
#
#   bash deploy/services.sh up       # start what is missing, print env lines on stdout
#   bash deploy/services.sh status   # say which services are up (exit 0 only if both are)
#   bash deploy/services.sh down     # stop both, wipe Kafka's data
#   bash deploy/services.sh spare-ports   # KAFKA_PORT=… KAFKA_CONTROLLER_PORT=… REDIS_PORT=… nobody uses
#   bash deploy/services.sh up --redis-cluster --kafka-brokers 3   # the clusters of deploy/cluster.sh
#
# `status` and `down` take optional service names (kafka, redis) to act on one only.
#
# A port that something else already listens on (a process not recorded in this
# script's pid files under RW_STATE) is never used: `up` names the port and the
# variable to change and exits 1, and `status` reports it as not ours.
#
# `up` prints only the env lines on stdout (all progress goes to stderr), so
#   set -a; eval "$(bash deploy/services.sh up)"; set +a
# exports KAFKA_BOOTSTRAP_SERVERS and REDIS_URL into the calling shell.
#
# If KAFKA_BOOTSTRAP_SERVERS / REDIS_URL are already set, `up` does not start that
# service (the caller supplies it) and echoes the caller's value back — except a REDIS_URL
# with a password, which is never printed: it stays in the caller's
# environment, and every message shows it as redis://user:***@host….
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

# redact_url URL: URL with its password (userinfo or ?password=) replaced by ***, for any
# message: a secret never reaches the terminal or a CI log.
redact_url() {
    sed -E -e 's#^([A-Za-z][A-Za-z0-9+.-]*://)([^:@/]*):[^@/]*@#\1\2:***@#' -e 's#([?&]password=)[^&]*#\1***#' <<<"$1"
}
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

# listen_inodes PORT: socket inodes of the TCP listeners on PORT (any address).
listen_inodes() {
    local hex
    hex="$(printf '%04X' "$1")"
    # /proc/net/tcp{,6}: field 2 is ADDR:PORT in hex, field 4 the state (0A = LISTEN), field 10 the inode
    awk -v port="$hex" 'FNR > 1 && $4 == "0A" { n = split($2, a, ":"); if (a[n] == port) print $10 }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# pid_listens PID PORT: true if process PID itself holds a listening socket on PORT,
# so a port is ours only when the process in our pid file is the one listening there.
pid_listens() {
    local pid="$1" port="$2" fds inode inodes
    # the listening sockets first, then the process's descriptors: a socket it opens in between
    # is then in neither list (not yet ours), never in the first list only (ours, but missed)
    inodes="$(listen_inodes "$port")"
    fds="$(ls -l "/proc/$pid/fd" 2>/dev/null)" || return 1
    for inode in $inodes; do
        [[ "$fds" == *"socket:[$inode]"* ]] && return 0
    done
    return 1
}

# pid_holds PID PORT: pid_listens as a verdict, not a poll: asked up to three times over a
# second before it says no. One read of /proc/net/tcp can miss PID's socket on a busy host (the
# kernel hands it out in pieces while connections come and go), and a process just started may
# bind its port between two checks; where "no" stops the script, one look is not enough.
pid_holds() {
    local i
    for i in 1 2 3; do
        pid_listens "$1" "$2" && return 0
        ((i < 3)) && sleep 0.5
    done
    return 1
}

# refuse_stranger NAME PORT PORT_VAR [URL_VAR URL]: exit 1 if PORT is taken by a process
# this script did not start (callers check their own pid file first). Never adopt it:
# writing topics or keys into someone else's Kafka or Redis is worse than stopping.
refuse_stranger() {
    local name="$1" port="$2" port_var="$3" url_var="${4:-}" url="${5:-}" hint=""
    port_open "$HOST" "$port" || return 0
    [[ -n "$url_var" ]] && hint=" (or $url_var=$url to use that server on purpose)"
    die "$name: $HOST:$port is taken by a process this script did not start; set $port_var to a free port$hint"
}

# next_candidate_port: set CANDIDATE to a random port in 20000-32767: below Linux's
# ephemeral range (32768+), so outgoing connections do not take it between the pick and
# the bind, and apart from the usual service ports. (Sets a variable rather than printing,
# so RANDOM advances in this shell; a test replaces it to steer the picks.)
next_candidate_port() { CANDIDATE=$((20000 + (RANDOM * 32768 + RANDOM) % 12768)); }

# spare_ports VAR...: print VAR=<port> for each VAR: distinct ports that no TCP socket on
# this machine uses (any state, so not one in TIME_WAIT either) and nothing answers on.
spare_ports() {
    local used=" " hex var tries
    # shellcheck disable=SC2013  # one hex port per line, no spaces: words are lines
    for hex in $(awk 'FNR > 1 { n = split($2, a, ":"); print a[n] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
        used+="$((16#$hex)) "
    done
    for var in "$@"; do
        for ((tries = 0; tries < 1000; tries++)); do
            next_candidate_port
            [[ "$used" == *" $CANDIDATE "* ]] && continue
            port_open "$HOST" "$CANDIDATE" && continue
            break
        done
        ((tries < 1000)) || die "no spare port found in 20000-32767"
        used+="$CANDIDATE "
        printf '%s=%s\n' "$var" "$CANDIDATE"
    done
}

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
        log "Redis: REDIS_URL is set by the caller ($(redact_url "$REDIS_URL")); not starting Redis"
        return 0
    fi
    if pid_running "$REDIS_PID" redis-server; then
        local pid
        pid="$(pid_of "$REDIS_PID")"
        pid_holds "$pid" "$REDIS_PORT" \
            || die "Redis: the redis-server of $RW_STATE (pid $pid) does not listen on $HOST:$REDIS_PORT; run 'down' with this RW_STATE first, or use another RW_STATE"
        log "Redis: already running (pid $pid)"
        return 0
    fi
    refuse_stranger Redis "$REDIS_PORT" REDIS_PORT REDIS_URL "redis://$HOST:$REDIS_PORT/0"
    command -v redis-server >/dev/null || apt_install redis-server
    mkdir -p "$REDIS_DIR"
    rm -f "$REDIS_PID"
    log "Redis: starting on $HOST:$REDIS_PORT (state in $REDIS_DIR)"
    # One flag pair per line, so persistence or tuning flags are one added line each.
    local args=(
        --bind "$HOST" --port "$REDIS_PORT" --protected-mode yes
        # AOF fsynced at every write: a terminal event is published only after its artefacts
        # are on disk (docs/reliability.md: durable artefacts; cost measured there).
        --appendonly yes --appendfsync always
        --daemonize yes --dir "$REDIS_DIR"
        --pidfile "$REDIS_PID" --logfile "$REDIS_LOG"
    )
    redis-server "${args[@]}" >&2 9>&-
    local i
    for ((i = 0; i < 100; i++)); do
        if pid_running "$REDIS_PID" redis-server && pid_listens "$(pid_of "$REDIS_PID")" "$REDIS_PORT"; then
            redis_loaded
            log "Redis: up (pid $(pid_of "$REDIS_PID"))"
            return 0
        fi
        sleep 0.1
    done
    tail -n 30 "$REDIS_LOG" >&2 2>/dev/null || true
    die "Redis did not start listening on $HOST:$REDIS_PORT"
}

# Up means PING answers PONG, not only a listening port: a Redis restarted on a kept state
# directory accepts connections while it still loads its append-only file and answers every
# command with LOADING until then — a worker started at that moment stops at its preflight
# with "cannot reach Redis" (BusyLoadingError).
redis_loaded() {
    local i reply said=0
    for ((i = 0; i < 1200; i++)); do
        reply="$(redis-cli -h "$HOST" -p "$REDIS_PORT" PING 2>/dev/null | tr -d '\r' || true)"
        [[ "$reply" == PONG ]] && return 0
        if [[ "$reply" == LOADING* ]] && ((!said)); then
            log "Redis: loading its data from $REDIS_DIR"
            said=1
        fi
        sleep 0.05
    done
    tail -n 30 "$REDIS_LOG" >&2 2>/dev/null || true
    die "Redis listens on $HOST:$REDIS_PORT but did not answer PING in about a minute (last reply: ${reply:-none})"
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
# Topics only as the plan has them (reasonwire topics apply, RW_CREATE_TOPICS=true): otherwise a
# producer that writes first creates reasoning.raw.v1 with num.partitions.
auto.create.topics.enable=false
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
}

# spawn_daemon DIR PIDFILE OUT CMD...: start CMD in DIR as a daemon and wait (up to 5 s) for
# PIDFILE. setsid: detached from the caller's terminal, so a Ctrl-C / job-control kill of the caller leaves it
# running. The inner bash writes its own pid and then execs CMD (same pid).
# 9>&- : do not let the daemon inherit the state-dir lock (see lock_state).
spawn_daemon() {
    local dir="$1" pidfile="$2" out="$3" i
    shift 3
    (
        cd "$dir"
        # shellcheck disable=SC2016  # $$/$1/$@ belong to the child bash
        setsid nohup bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$pidfile" "$@" >"$out" 2>&1 </dev/null 9>&- &
    )
    for ((i = 0; i < 100; i++)); do
        [[ -s "$pidfile" ]] && break
        sleep 0.05
    done
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

# random_16_bytes: the entropy behind a cluster id (a function, so a test can replace it).
random_16_bytes() { head -c 16 /dev/urandom; }

# kafka_cluster_id: a fresh Kafka Uuid string (16 random bytes as unpadded base64url, 22
# chars). One draw in 64 begins with '-', which the storage tool's option parser takes
# for an option ("expected one argument"); like Kafka's own Uuid.randomUuid(), draw
# again until it does not, and never return the reserved zero / metadata-topic ids.
kafka_cluster_id() {
    local id
    while :; do
        id="$(random_16_bytes | base64 -w0)"
        id="${id%==}" && id="${id//+/-}" && id="${id//\//_}" # unpadded base64url
        [[ "$id" == -* || "$id" == AAAAAAAAAAAAAAAAAAAAA[AQ] || ${#id} -ne 22 ]] || break
    done
    printf '%s\n' "$id"
}

kafka_format() {
    if [[ -f "$KAFKA_DATA/meta.properties" ]]; then
        log "Kafka: storage already formatted"
        return 0
    fi
    local cluster_id
    cluster_id="$(kafka_cluster_id)"
    log "Kafka: formatting storage (cluster id $cluster_id)"
    # --standalone: this node is the sole voter of a dynamic (KIP-853) quorum,
    # which pairs with controller.quorum.bootstrap.servers in server.properties.
    # --cluster-id=ID (one argument) as well as an id that cannot start with '-'.
    kafka_cmd
    "${KAFKA_CMD[@]}" kafka.tools.StorageTool format "--cluster-id=$cluster_id" -c "$KAFKA_CONF" --standalone >&2 \
        || die "kafka-storage format failed"
}

kafka_wait_started() {
    local pid="$1" deadline=$((SECONDS + KAFKA_START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            kafka_fail "Kafka exited during startup"
        fi
        if grep -qs "Kafka Server started" "$KAFKA_LOGS/server.log"; then
            if ! pid_listens "$pid" "$KAFKA_PORT"; then
                # "Kafka Server started" may be an earlier start's line (the log is appended to on a
                # restart): a stranger only if the port is open and our broker does not hold it
                port_open "$HOST" "$KAFKA_PORT" && ! pid_holds "$pid" "$KAFKA_PORT" \
                    && die "Kafka: the broker of $RW_STATE (pid $pid) is not the one on $HOST:$KAFKA_PORT; run 'down' with this RW_STATE first, or use another RW_STATE"
                sleep 0.5
                continue
            fi
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

# kafka_refuse_strangers: exit 1 unless both Kafka ports are free or held by our broker.
kafka_refuse_strangers() {
    [[ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]] || return 0
    pid_running "$KAFKA_PID" kafka.Kafka && return 0
    refuse_stranger Kafka "$KAFKA_PORT" KAFKA_PORT KAFKA_BOOTSTRAP_SERVERS "$HOST:$KAFKA_PORT"
    refuse_stranger "Kafka controller" "$KAFKA_CONTROLLER_PORT" KAFKA_CONTROLLER_PORT
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
    kafka_refuse_strangers
    ensure_java
    ensure_kafka_libs
    write_kafka_conf
    kafka_format
    # Fresh log files per start, so the readiness grep never sees an old run.
    rm -rf "$KAFKA_DIR/logs.prev"
    mv "$KAFKA_LOGS" "$KAFKA_DIR/logs.prev"
    mkdir -p "$KAFKA_LOGS"
    log "Kafka: starting broker on $HOST:$KAFKA_PORT (controller $HOST:$KAFKA_CONTROLLER_PORT, state in $KAFKA_DIR)"
    rm -f "$KAFKA_PID"
    kafka_cmd
    spawn_daemon "$KAFKA_DIR" "$KAFKA_PID" "$KAFKA_OUT" "${KAFKA_CMD[@]}" kafka.Kafka "$KAFKA_CONF"
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
    local url="${REDIS_URL:-redis://$HOST:$REDIS_PORT/0}"
    if [[ "$(redact_url "$url")" != "$url" ]]; then
        # the caller's, with a password: already in its environment; never on the terminal
        log "Redis: REDIS_URL (yours, with a password) not printed: $(redact_url "$url")"
    else
        printf 'REDIS_URL=%s\n' "$url"
    fi
}

lock_state() {
    mkdir -p "$RW_STATE"
    exec 9>"$RW_STATE/.lock"
    flock -w 180 9 || die "another services.sh holds $RW_STATE/.lock"
}

cmd_up() {
    lock_state
    kafka_refuse_strangers # before Redis starts, so a refusal leaves nothing running
    redis_up
    kafka_up
    print_env
}

# wanted NAME ARGS...: true if NAME is among ARGS, or ARGS is empty (= every service).
wanted() {
    local name="$1"
    shift
    [[ $# -eq 0 ]] && return 0
    [[ " $* " == *" $name "* ]]
}

check_names() {
    local n
    for n in "$@"; do
        [[ "$n" == kafka || "$n" == redis ]] || { echo "unknown service '$n' (kafka, redis)" >&2; exit 2; }
    done
}

cmd_down() {
    check_names "$@"
    lock_state
    if wanted kafka "$@"; then kafka_down; fi
    if wanted redis "$@"; then redis_down; fi
}

# status_one NAME PIDFILE PATTERN PORT SUPPLIED: up only if the process in our pid file
# is the one listening; a port held by anything else is reported and is not "up".
status_one() {
    local name="$1" pidfile="$2" pattern="$3" port="$4" supplied="$5"
    if [[ -n "$supplied" ]]; then
        printf '%-6s supplied by caller: %s\n' "$name" "$(redact_url "$supplied")"
        return 0
    fi
    if pid_running "$pidfile" "$pattern" && pid_listens "$(pid_of "$pidfile")" "$port"; then
        printf '%-6s up   pid %s on %s:%s\n' "$name" "$(pid_of "$pidfile")" "$HOST" "$port"
    elif port_open "$HOST" "$port"; then
        printf '%-6s not ours: %s:%s is taken by a process this script did not start\n' "$name" "$HOST" "$port"
        return 1
    elif pid_running "$pidfile" "$pattern"; then
        printf '%-6s starting/unhealthy: pid %s alive, %s:%s not listening\n' \
            "$name" "$(pid_of "$pidfile")" "$HOST" "$port"
        return 1
    else
        printf '%-6s down\n' "$name"
        return 1
    fi
}

cmd_status() {
    check_names "$@"
    local rc=0
    if wanted kafka "$@"; then
        status_one Kafka "$KAFKA_PID" kafka.Kafka "$KAFKA_PORT" "${KAFKA_BOOTSTRAP_SERVERS:-}" || rc=3
    fi
    if wanted redis "$@"; then
        status_one Redis "$REDIS_PID" redis-server "$REDIS_PORT" "${REDIS_URL:-}" || rc=3
    fi
    return "$rc"
}

main() {
    local cmd="${1:-}"
    shift || true
    case "$cmd" in
        up)
            # up --redis-cluster / --kafka-brokers N: the clustered services (deploy/cluster.sh)
            if (($#)); then exec bash "$SCRIPT_DIR/cluster.sh" up "$@"; fi
            cmd_up
            ;;
        down) cmd_down "$@" ;;
        status) cmd_status "$@" ;;
        spare-ports) spare_ports KAFKA_PORT KAFKA_CONTROLLER_PORT REDIS_PORT ;;
        *)
            echo "usage: $0 up [--redis-cluster] [--kafka-brokers N]|down [kafka|redis]|status [kafka|redis]|spare-ports" >&2
            exit 2
            ;;
    esac
}

# Sourced (by tests) it only defines the functions; run, it does the command.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main "$@"
fi
