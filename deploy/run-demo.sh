#!/usr/bin/env bash
# deploy/run-demo.sh - `make run`'s main job, run inside deploy/with-services.sh (which exports
# KAFKA_BOOTSTRAP_SERVERS / REDIS_URL): start `reasonwire gateway` on GATEWAY_PORT (default: a
# spare port) with a one-off demo key, run `reasonwire demo` (worker, samples published,
# events and artefacts shown, the viewer URL of each run printed), then:
#
# * RW_DEMO_HOLD=1, or unset with stdin and stdout on a terminal: keep the gateway (and so the
#   viewer URLs, and the services with-services.sh started) up until Ctrl-C, then stop them all;
# * RW_DEMO_HOLD=0, or unset elsewhere (CI, tests, a pipe): stop the gateway and return;
# * KEEP_SERVICES=1: leave the gateway running in the background and say how to stop it.
#
# Exit status: the demo's (a hold ended by Ctrl-C is still the demo's success).
set -uo pipefail

VENV="${VENV:-.venv}"
spare_port() { "$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
GATEWAY_PORT="${GATEWAY_PORT:-$(spare_port)}"

RW_DEMO_KEY="${RW_DEMO_KEY:-demo-$RANDOM$RANDOM$RANDOM}"
RW_GATEWAY_URL="http://127.0.0.1:$GATEWAY_PORT"
export RW_DEMO_KEY RW_GATEWAY_URL
digest="$(printf %s "$RW_DEMO_KEY" | sha256sum | cut -d' ' -f1)"
# Its output goes to a file: a gateway left running (KEEP_SERVICES) must not hold the caller's pipe.
gateway_log="${TMPDIR:-/tmp}/reasonwire-demo-gateway-$$.log"
RW_GATEWAY_KEYS="{\"keys\":[{\"sha256\":\"$digest\",\"tenant\":\"demo\",\"audiences\":[\"public\",\"internal\"]}]}" \
    "$VENV/bin/reasonwire" gateway --port "$GATEWAY_PORT" >"$gateway_log" 2>&1 </dev/null &
gateway=$!
echo "gateway log: $gateway_log" >&2

"$VENV/bin/reasonwire" demo
rc=$?

hold="${RW_DEMO_HOLD:-}"
if [[ -z "$hold" ]]; then
    if [[ -t 0 && -t 1 ]]; then hold=1; else hold=0; fi
fi

if [[ -n "${KEEP_SERVICES:-}" ]]; then
    echo "gateway (pid $gateway) keeps running on $RW_GATEWAY_URL; stop it with: kill $gateway"
    exit "$rc"
fi
if [[ "$rc" -eq 0 && "$hold" == 1 ]]; then
    if kill -0 "$gateway" 2>/dev/null; then
        # The gateway is a background job of this script: Ctrl-C reaches this shell, not it.
        trap 'kill "$gateway" 2>/dev/null' INT TERM
        echo
        echo "The viewer URLs above work while the gateway runs: press Ctrl-C to stop it and the services."
        wait "$gateway"
        wait "$gateway" 2>/dev/null
        echo "gateway stopped"
        exit "$rc"
    fi
    echo "make run: the gateway is not running, so the viewer URLs above will not open; its log: $gateway_log" >&2
    tail -3 "$gateway_log" >&2
fi
kill "$gateway" 2>/dev/null
wait "$gateway" 2>/dev/null
[[ "$hold" == 1 ]] || echo "gateway stopped, so the viewer URLs above no longer answer: run \`make run\` in a terminal (or RW_DEMO_HOLD=1 make run) to keep it up until Ctrl-C"
exit "$rc"
