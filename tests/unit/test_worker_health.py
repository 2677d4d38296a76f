"""The worker's health hooks without services: the expiry guard after an outage (issue 13).

The clients are built but never connect: nothing here reaches Redis or a broker.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from reasonwire.workers.core.delivery_machine import Commit, Stepped
from reasonwire.workers.core.normalizer import RawRecord
from reasonwire.workers.services.ingress.records import RunEnvelope
from reasonwire.workers.services.normalizer import NormalizerWorker
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.store import ArtefactStore
from reasonwire.workers.ops.telemetry import setup_telemetry
from reasonwire.workers.ops.telemetry.normalizer import NormalizerTelemetry

FIRST = b'{"type":"response.created","response":{"id":"resp_1","model":"m","status":"in_progress","output":[]}}'


def _worker(timeout_s: float) -> tuple[NormalizerWorker, list[Any]]:
    telemetry = NormalizerTelemetry(setup_telemetry(install_global=False, env={}), group_id="g")
    store = ArtefactStore(Redis.from_url("redis://127.0.0.1:1/0"), artefact_ttl_s=60, journal_ttl_s=60)
    worker = NormalizerWorker(WorkerSettings(inactivity_timeout_s=timeout_s), None, store, telemetry)  # type: ignore[arg-type]
    launched: list[Any] = []
    # the I/O is not under test: an expiry decided is its membership question (or, unasked, its launch)
    worker._take = lambda actions: launched.extend(a for a in actions if isinstance(a, Stepped) or (isinstance(a, Commit) and a.membership))  # type: ignore[method-assign]
    run = RunEnvelope("openai-responses", "idle-run", "thread")
    item = worker.normalizer.route(RawRecord(b"idle-run", FIRST, tuple(run.headers(0)), 0, 0))
    worker.normalizer.accept(item, now=-60.0)  # held, silent for a minute of stream time (issue 24: the clock starts at 0)
    worker.machine._committed[0] = 1  # its record was committed: an expiry there asks the group with that offset
    return worker, launched


async def test_idle_runs_wait_a_whole_timeout_of_service_after_an_outage() -> None:
    """Silence while Redis (or the broker) was away is no evidence that the ingress vanished: the
    run is expired only once the worker has served without a break for the whole timeout."""
    worker, launched = _worker(timeout_s=0.2)
    worker._note_failure(RedisConnectionError("down"))
    await worker.expire_idle_runs()
    assert launched == []
    worker._note_success({})  # the first poll committed after the outage
    await worker.expire_idle_runs()
    assert launched == []  # back for less than a timeout
    await asyncio.sleep(0.25)
    await worker.expire_idle_runs()
    assert len(launched) == 1


async def test_a_failure_backs_off_and_a_success_resets() -> None:
    worker, _ = _worker(timeout_s=30)
    loop = asyncio.get_running_loop()
    worker._note_failure(RedisConnectionError("down"))
    first = worker._retry_at - loop.time()
    for _ in range(6):
        worker._note_failure(RedisConnectionError("down"))
    assert 0 < first <= 0.1 < worker._retry_at - loop.time() <= 5.0
    assert worker.ready["degraded"] == "redis: ConnectionError"
    worker._note_success({})
    assert worker.backoff.attempts == 0 and worker.ready["degraded"] is None


async def test_an_expiry_tick_that_expires_nothing_records_no_poll() -> None:
    """Found by review: every expiry tick (every ≤ 5 s) entered and left an empty batch trace,
    recording a near-zero ``reasonwire.poll.duration`` for no poll — at low traffic most of the
    histogram."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    t = setup_telemetry(metric_reader=reader, install_global=False, env={})
    try:
        store = ArtefactStore(Redis.from_url("redis://127.0.0.1:1/0"), artefact_ttl_s=60, journal_ttl_s=60)
        worker = NormalizerWorker(WorkerSettings(inactivity_timeout_s=30), None, store, NormalizerTelemetry(t, group_id="g"))  # type: ignore[arg-type]
        worker._healthy_since = time.monotonic() - 100  # served without a break for longer than the timeout
        for _ in range(3):
            await worker.expire_idle_runs()
        data = reader.get_metrics_data()
        names = {m.name for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics for m in sm.metrics}
        assert "reasonwire.poll.duration" not in names
    finally:
        t.log_guard.uninstall()
        t.shutdown()


async def test_a_revoked_partition_is_no_longer_reported_in_the_lag() -> None:
    """Found by review: the lag of a revoked partition stayed in this worker's gauge (and
    ``/readyz``), so a sum over the group counted it twice once its new owner reported it."""
    from aiokafka import TopicPartition

    from reasonwire.contracts import topics

    worker, _ = _worker(timeout_s=30)
    worker.health_metrics.lag.update({0: 5, 1: 7})
    await worker.forget([TopicPartition(topics.RAW, 1)])
    assert worker.health_metrics.lag == {0: 5}


