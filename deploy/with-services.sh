#!/usr/bin/env bash
# deploy/with-services.sh CMD [ARG...] - run CMD with a Kafka broker and a Redis server,
# exported to it as KAFKA_BOOTSTRAP_SERVERS / REDIS_URL. `make test`, `make run` and
# `make bench` run through this.
#
# * Services named by KAFKA_BOOTSTRAP_SERVERS / REDIS_URL are used as given.
# * Otherwise, unless RW_STATE is set, it starts a private pair with deploy/services.sh:
#   a fresh state dir and spare ports (`services.sh spare-ports`; a KAFKA_PORT,
#   KAFKA_CONTROLLER_PORT or REDIS_PORT the caller set is kept), so it never meets
#   another stack's ports or data. They are stopped and the state dir deleted when CMD
#   ends (KEEP_SERVICES=1 keeps them and says how to reach and stop them).
# * With RW_STATE set, the caller's state and ports are used (services.sh defaults
#   9092/9093/6379 for ports not set); what was already up there stays up afterwards.
#
# Either way a port held by a process services.sh did not start is never adopted: `up`
# names the port and the variable to change, and this exits 1 without running CMD.
# Exit status: CMD's.
set -euo pipefail

SERVICES=(bash "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/services.sh")
log() { printf '[with-services] %s\n' "$*" >&2; }

[[ $# -gt 0 ]] || { echo "usage: $0 CMD [ARG...]" >&2; exit 2; }

private=""
if [[ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" || -z "${REDIS_URL:-}" ]] && [[ -z "${RW_STATE:-}" ]]; then
    private=yes
    RW_STATE="$(mktemp -d "${TMPDIR:-/tmp}/reasonwire-run.XXXXXX")"
    export RW_STATE
    while IFS='=' read -r var port; do
        [[ -n "${!var:-}" ]] || export "$var=$port"
    done < <("${SERVICES[@]}" spare-ports)
fi

# Services this command must leave running: supplied by the caller, or already up
# (and ours) in the caller's RW_STATE. A private state has nothing up yet.
keep=()
for name in kafka redis; do
    if [[ -z "$private" ]] && "${SERVICES[@]}" status "$name" >/dev/null 2>&1; then
        keep+=("$name")
    fi
done

cleanup() {
    local rc=$? stop=() name
    trap - EXIT INT TERM
    if [[ -n "${KEEP_SERVICES:-}" ]]; then
        [[ -z "$private" ]] || log "services kept: KAFKA_BOOTSTRAP_SERVERS=${KAFKA_BOOTSTRAP_SERVERS:-} REDIS_URL=${REDIS_URL:-} (RW_STATE=$RW_STATE KAFKA_PORT=$KAFKA_PORT KAFKA_CONTROLLER_PORT=$KAFKA_CONTROLLER_PORT REDIS_PORT=$REDIS_PORT); stop them with: RW_STATE=$RW_STATE KAFKA_CONTROLLER_PORT=$KAFKA_CONTROLLER_PORT bash deploy/services.sh down"
        exit "$rc"
    fi
    for name in kafka redis; do
        [[ " ${keep[*]} " == *" $name "* ]] || stop+=("$name")
    done
    if ((${#stop[@]})); then
        "${SERVICES[@]}" down "${stop[@]}" >/dev/null 2>&1 || log "could not stop ${stop[*]} (RW_STATE=$RW_STATE)"
    fi
    [[ -z "$private" ]] || rm -rf "$RW_STATE"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

env_lines="$("${SERVICES[@]}" up)"
while IFS='=' read -r var value; do
    export "$var=$value"
done <<<"$env_lines"

"$@"
