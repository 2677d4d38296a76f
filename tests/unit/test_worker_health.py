"""The worker's health hooks without services (the timing decisions themselves are the delivery
machine's: tests/unit/test_delivery_machine.py).

The clients are built but never connect: nothing here reaches Redis or a broker.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from reasonwire.workers.core.actions import Commit, Stepped
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
    worker.normalizer.accept(item, now=0.0)  # held
    worker.machine._committed[0] = 1  # its record was committed: an expiry there asks the group with that offset
    return worker, launched


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
        worker.tick()
        worker.machine._healthy_since = time.monotonic() - 100  # served without a break for longer than the timeout
        for _ in range(3):
            worker.tick()
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
    worker.health.metrics.lag.update({0: 5, 1: 7})
    await worker.forget([TopicPartition(topics.RAW, 1)])
    assert worker.health.metrics.lag == {0: 5}


