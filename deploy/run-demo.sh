#!/usr/bin/env bash
# deploy/run-demo.sh - `make run`'s main job, run inside deploy/with-services.sh (which exports
# KAFKA_BOOTSTRAP_SERVERS / REDIS_URL): start `reasonwire gateway` on GATEWAY_PORT (default: a
# spare port) with a one-off demo key, run `reasonwire demo` (worker, samples published,
# events and artefacts shown, the viewer URL of each run printed), then stop the gateway —
# unless KEEP_SERVICES=1, which leaves it running and says where. Exit status: the demo's.
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
if [[ -n "${KEEP_SERVICES:-}" ]]; then
    echo "gateway (pid $gateway) keeps running on $RW_GATEWAY_URL; stop it with: kill $gateway"
else
    kill "$gateway" 2>/dev/null
    wait "$gateway" 2>/dev/null
fi
exit "$rc"
