"""The replay worker while Redis is away with requests pending.

Real Kafka; a private real Redis (its own port and dir) so the test can stop it without
touching the session's. The replay worker is a real process (``reasonwire worker replay``).
Before the fix a failed request raised, FastStream NACKed it and it was redelivered at once:
in 15 s of outage 22–34 MB of log (a traceback per attempt) at 65–93 % of a core.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from reasonwire.contracts import topics
from reasonwire.contracts.replay import ReplayRequest, ReplayTarget
from reasonwire.workers.ops.settings import WorkerSettings
from tests.integration.conftest import WorkerProcess
from tests.integration.test_backoff_and_health import PrivateRedis, _free_port, _readyz

pytestmark = pytest.mark.integration

OUTAGE_S = 12.0
PENDING = 20


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest_asyncio.fixture
async def replies(services: dict[str, str]) -> AsyncIterator[AIOKafkaConsumer]:
    consumer = AIOKafkaConsumer(
        topics.REPLAY_REPLIES, bootstrap_servers=services["KAFKA_BOOTSTRAP_SERVERS"], auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    yield consumer
    await consumer.stop()


async def _ask(producer: AIOKafkaProducer, n: int, prefix: str) -> set[str]:
    """``n`` requests for one thread (an empty history: the worker still reads the thread's
    artefacts from Redis, which is what fails during the outage)."""
    ids = set()
    for _ in range(n):
        request = ReplayRequest(request_id=f"{prefix}-{uuid.uuid4().hex[:10]}", tenant="t-backoff", thread_id="th-backoff",
                                target=ReplayTarget(grammar="anthropic-messages"), history=[])
        await producer.send(topics.REPLAY_REQUESTS, request.model_dump_json(by_alias=True, exclude_none=True).encode(), key=b"th-backoff")
        ids.add(request.request_id)
    await producer.flush()
    return ids


async def _answered(replies: AIOKafkaConsumer, wanted: set[str], timeout: float) -> set[str]:
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not wanted <= seen:
        batch = await replies.getmany(timeout_ms=500)
        seen |= {r.key.decode() for records in batch.values() for r in records if r.key}
    return seen & wanted


async def test_replay_worker_backs_off_and_logs_state_changes_during_a_redis_outage(
    primed_group: WorkerSettings, producer: Any, replies: AIOKafkaConsumer, tmp_path: Path
) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server on PATH (deploy/services.sh installs it)")
    redis = PrivateRedis(tmp_path)
    redis.start()
    health = _free_port()
    worker = WorkerProcess(
        primed_group, tmp_path / "replay.log",
        {"REDIS_URL": f"redis://127.0.0.1:{redis.port}/0", "RW_HEALTH_PORT": str(health),
         "RW_REPLAY_GROUP_ID": f"rw-replay-backoff-{uuid.uuid4().hex[:8]}"},
        kind="replay",
    )
    try:
        worker.wait_assigned()
        # a new group reads from the end: a first request answered means the worker has its position
        probe: set[str] = set()
        deadline = time.monotonic() + 60
        while not probe and time.monotonic() < deadline:
            probe = await _answered(replies, await _ask(producer, 1, "probe"), 3)
        assert probe, "the replay worker never answered a probe request"
        before, cpu0, t0 = worker.log.stat().st_size, _cpu_seconds(worker.proc.pid), time.monotonic()
        redis.stop()
        pending = await _ask(producer, PENDING, "pending")
        time.sleep(max(0.0, t0 + OUTAGE_S / 2 - time.monotonic()))
        during = _readyz(health)
        time.sleep(max(0.0, t0 + OUTAGE_S - time.monotonic()))
        outage_log, cpu1, t1 = worker.log.read_bytes()[before:], _cpu_seconds(worker.proc.pid), time.monotonic()
        redis.start()
        answered = await _answered(replies, pending, 60)
        text = worker.log.read_text(errors="replace")
    finally:
        worker.stop()
        redis.stop()
    cpu = (cpu1 - cpu0) / (t1 - t0)
    assert answered == pending, f"{len(answered)} of {len(pending)} requests answered after the outage"
    assert len(outage_log) < 10_240, f"{len(outage_log):,} B of log in {t1 - t0:.0f}s of outage"
    assert cpu < 0.05, f"{100 * cpu:.0f} % of a core while Redis was away"
    assert b"Traceback" not in outage_log, "a known infrastructure error is logged without a traceback"
    ours = [line for line in outage_log.decode(errors="replace").splitlines() if " reasonwire." in line]
    assert 1 <= len(ours) <= 3, ours  # degraded (+ a summary at most), not one line per retry
    assert "degraded: redis: ConnectionError" in text and "recovered after" in text
    assert during == 503  # not ready while requests wait on Redis
