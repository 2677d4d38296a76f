"""Redis down under load: backoff, a few log lines, not-ready, then recovery.

Real Kafka; a private real Redis (its own port and dir) so the test can stop it without
touching the session's. The worker is a real process (``reasonwire worker normalize``).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Collector, WorkerProcess, send
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.sse import read_events

pytestmark = pytest.mark.integration

FIXTURE = Path("tests/fixtures/openai-responses/c_interleaved_reasoning_tool_calls.jsonl")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    def __init__(self, tmp: Path) -> None:
        self.port = _free_port()
        self.dir = tmp / "redis"
        self.dir.mkdir()

    def start(self) -> None:
        subprocess.run(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--daemonize", "yes", "--dir", str(self.dir),
             "--appendonly", "yes", "--appendfsync", "always", "--pidfile", str(self.dir / "pid"), "--logfile", str(self.dir / "log")],
            check=True,
        )
        # ready once PING answers PONG: a restarted server accepts connections while it still
        # loads its append-only file, and answers every command with LOADING until it is done
        # (a worker treats that as an outage; a test that means "Redis is back" must not see it)
        for _ in range(200):
            ping = subprocess.run(["redis-cli", "-p", str(self.port), "PING"], capture_output=True, text=True, check=False)
            if ping.stdout.strip() == "PONG":
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not answer PING with PONG in about 10 s")

    def stop(self) -> None:
        subprocess.run(["redis-cli", "-p", str(self.port), "SHUTDOWN", "SAVE"], capture_output=True, check=False)
        time.sleep(0.3)


def _readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=8) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


async def test_redis_outage_backs_off_logs_state_changes_and_reports_not_ready(primed_group: WorkerSettings, producer: Any, tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server on PATH (deploy/services.sh installs it)")
    redis = PrivateRedis(tmp_path)
    redis.start()
    health = _free_port()
    worker = WorkerProcess(
        primed_group, tmp_path / "worker.log",
        {"REDIS_URL": f"redis://127.0.0.1:{redis.port}/0", "RW_HEALTH_PORT": str(health), "RW_GROUP_ID": primed_group.group_id},
    )
    try:
        worker.wait_assigned()
        assert _readyz(health) == 200
        runs = [RunEnvelope("openai-responses", f"backoff-{i}-{uuid.uuid4().hex[:6]}", f"thread-{i}") for i in range(6)]
        with FIXTURE.open() as f:
            events = list(read_events(f))
        records = [list(raw_records(run, events)) for run in runs]
        await send(producer, [r for rs in records[:3] for r in rs])
        async with Collector(primed_group.kafka_bootstrap_servers) as c:
            await c.until(lambda c: all(c.finished(r.run_id) for r in runs[:3]), timeout=60)
        # measured before the stop: the worker can notice the outage at once (the ended markers
        # of the finished runs are written after their RUN_FINISHED went out) and log
        # ``degraded`` while stop() still waits for Redis to go
        before = worker.log.stat().st_size
        redis.stop()
        await send(producer, [r for rs in records[3:] for r in rs])  # load while Redis is away
        time.sleep(6)
        during = _readyz(health)
        time.sleep(4)
        outage_log = worker.log.read_bytes()[before:]
        redis.start()
        async with Collector(primed_group.kafka_bootstrap_servers) as c:
            await c.until(lambda c: all(c.finished(r.run_id) for r in runs), timeout=60)
        deadline = time.monotonic() + 10  # one backoff step (5 s) and the commit after the catch-up
        while (after := _readyz(health)) != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        text = worker.log.read_text(errors="replace")
    finally:
        worker.stop()
        redis.stop()
    assert during == 503 and after == 200
    assert b"Traceback" not in outage_log, "a known infrastructure error is logged without a traceback"
    ours = [line for line in outage_log.decode(errors="replace").splitlines() if " reasonwire." in line]
    assert 1 <= len(ours) <= 3, ours  # degraded (+ a summary at most), not one line per retry
    assert len(outage_log) < 10_240
    assert "degraded: redis: ConnectionError" in text and "recovered after" in text
