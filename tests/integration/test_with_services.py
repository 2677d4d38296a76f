"""deploy/with-services.sh end to end (what `make test`, `make run`, `make bench` use): a private
Kafka + Redis on spare ports, handed to the command, then stopped and deleted.

Starts its own broker JVM and redis-server (about half a minute); skipped where the
machine cannot run them (the testcontainers path has no local Java / Redis).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WITH_SERVICES = ROOT / "deploy" / "with-services.sh"
CALLER_SETTINGS = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "RW_STATE", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "REDIS_PORT", "KEEP_SERVICES")

pytestmark = pytest.mark.skipif(not (shutil.which("java") and shutil.which("redis-server")), reason="needs Java and redis-server")


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_private_pair_on_spare_ports_is_handed_over_then_stopped_and_deleted(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in CALLER_SETTINGS} | {"TMPDIR": str(tmp_path)}
    report = tmp_path / "seen"
    script = f"""
        set -e
        {{ echo "$RW_STATE"; echo "$KAFKA_BOOTSTRAP_SERVERS"; echo "$REDIS_URL"
           cat "$RW_STATE/kafka/kafka.pid" "$RW_STATE/redis/redis.pid"; }} >"{report}"
        port="${{REDIS_URL##*:}}"
        exec 3<>"/dev/tcp/127.0.0.1/${{port%%/*}}"   # Redis answers on the port it was given
        printf 'PING\\r\\n' >&3; read -r -t 5 pong <&3; echo "$pong" >>"{report}"
        exit 3
    """
    out = subprocess.run(["bash", str(WITH_SERVICES), "bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 3, out.stderr[-3000:]  # the command's own status
    state, kafka, redis_url, kafka_pid, redis_pid, pong = report.read_text().split()
    assert pong.strip() == "+PONG"
    kafka_port, redis_port = int(kafka.rsplit(":", 1)[1]), int(redis_url.rsplit(":", 1)[1].split("/")[0])
    assert 20000 <= kafka_port < 32768 and 20000 <= redis_port < 32768
    assert Path(state).parent == tmp_path  # a fresh state dir of its own ...
    assert not Path(state).exists()  # ... deleted afterwards
    assert not alive(int(kafka_pid)) and not alive(int(redis_pid))
    assert not listening(kafka_port) and not listening(redis_port)
