"""The normalizer as a FastStream app: the broker, the raw topic's subscriber and its hooks, the
start-up sequence, the clock and health loops, the rebalance listener, and ``run``.

The decisions are the delivery machine's and the I/O the adapter's
(:mod:`reasonwire.workers.services.normalizer`); this module only wires them to FastStream and
aiokafka: what the subscriber hands over (:func:`_parse_raw`, :func:`_polled`), when the
machine's clock ticks (:func:`create_app`'s loops), and what the group's rebalances tell it
(:class:`_HandOver`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, NamedTuple

from aiokafka import AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from faststream import AckPolicy, FastStream
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage

from reasonwire.contracts import topics
from reasonwire.workers.core.normalizer import RawRecord
from reasonwire.workers.io import topics_admin
from reasonwire.workers.io.outbox import broker_answers, open_outbox
from reasonwire.workers.io.kafka_security import broker_security, client_kwargs, servers
from reasonwire.workers.io.producer_config import DURABLE
from reasonwire.workers.io.raw_consumer import committed_offsets
from reasonwire.workers.io.redis_connect import connect, redis_wait
from reasonwire.workers.io.store import ArtefactStore
from reasonwire.workers.ops import native
from reasonwire.workers.ops.gc_pause import tune_gc
from reasonwire.workers.io.topics_admin import wait_for_topics
from reasonwire.workers.ops.health import HealthServer, install_log_throttle, wait_until_allowed
from reasonwire.workers.ops.intervals import expiry_interval, metadata_max_age_ms
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.ops.telemetry import Telemetry, setup_telemetry
from reasonwire.workers.ops.telemetry.normalizer import NormalizerTelemetry
from reasonwire.workers.services.normalizer import NormalizerWorker
from reasonwire.workers.services.startup import (
    adopt_committed_witness, committed_witness, ensure_topics, evicting_store, output_limits, warn_unless_durable,
)

log = logging.getLogger("reasonwire.normalize")


async def readiness(worker: NormalizerWorker) -> dict[str, Any]:
    """``/readyz``: Redis answers, the broker answers, the worker is not degraded, its consumer runs."""
    consumer = worker.consumer
    body: dict[str, Any] = {
        "degraded": worker.health.degraded,
        "consumer_started": consumer is not None,
        "partitions": sorted(tp.partition for tp in consumer.assignment()) if consumer is not None else [],
        "store_epoch": worker.store.epoch,
        "store_lost_ms": worker.store.lost_ms,
        "lag": {str(p): n for p, n in sorted(worker.health.metrics.lag.items())},
    }
    try:
        await asyncio.wait_for(worker.store.redis.ping(), 1.0)
        body["redis"] = "ok"
    except Exception as exc:
        body["redis"] = type(exc).__name__
    body["kafka"] = await broker_answers(worker.producer)
    body["ready"] = body["redis"] == "ok" and body["kafka"] == "ok" and body["degraded"] is None and body["consumer_started"]
    return body


def create_app(settings: WorkerSettings | None = None, telemetry: Telemetry | None = None) -> tuple[FastStream, NormalizerWorker]:
    """The app and its worker; ``telemetry`` defaults to :func:`setup_telemetry` (``OTEL_*``)."""
    settings = settings or WorkerSettings.from_env()
    traces = NormalizerTelemetry(telemetry or setup_telemetry(), group_id=settings.group_id, metric_flush_s=1.0)
    # (min.insync.replicas=2 of 3) and a retried send is not written twice
    broker = KafkaBroker(
        servers(settings.kafka_bootstrap_servers), log_level=logging.DEBUG, linger_ms=2, **DURABLE, security=broker_security(),
        metadata_max_age_ms=metadata_max_age_ms(settings),
    )
    store = ArtefactStore(
        connect(settings.redis_url),
        artefact_ttl_s=settings.artefact_ttl_s,
        journal_ttl_s=settings.journal_ttl_s,
        **redis_wait(),
    )
    worker = NormalizerWorker(settings, broker, store, traces)
    listener = _HandOver()
    listener.worker = worker

    @broker.subscriber(
        topics.RAW,
        group_id=settings.group_id,
        batch=True,
        max_records=settings.max_batch,
        batch_timeout_ms=20,
        # Kafka's defaults (answer as soon as a record is there) unless the operator trades latency
        # for CPU: at moderate rates a poll carries a few records and its fixed work (fetch, Redis
        # write, produce request, commit) is paid per few (docs/operations.md)
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        fetch_min_bytes=settings.fetch_min_bytes,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.MANUAL,  # the worker commits each poll itself, in order, once it is acknowledged
        listener=listener,
        parser=_parse_raw,
        decoder=_polled,
    )
    # ``Any``, not ``Polled``: fast_depends validates an annotated body with pydantic, which
    # would rebuild the poll's tuple of records on every poll
    async def on_raw(polled: Any) -> None:  # the poll's records and consumer, as its body (see _polled)
        worker.consumer = polled.consumer
        await worker.handle([_raw_record(r) for r in polled.records])

    expiry: dict[str, Any] = {}

    async def tick_forever() -> None:
        while True:
            try:
                worker.tick()
            except Exception as exc:  # a bug here must not stop the machine's clock: said once per kind
                worker.health.warn_repeating(("tick", type(exc).__name__), "clock tick failed (%s)", type(exc).__name__)
            await asyncio.sleep(0.25)

    async def health_forever() -> None:
        interval = expiry_interval(settings)
        while True:
            await asyncio.sleep(interval)
            try:
                await worker.tick_health()
            except Exception as exc:  # a bug here must not stop the health loop: say it once per kind
                worker.health.warn_repeating(("health", type(exc).__name__), "health tick failed (%s)", type(exc).__name__)

    app = FastStream(broker, logger=log)

    @app.on_startup
    async def _topics() -> None:
        if settings.health_port:  # first: /readyz says what the worker waits for; /metrics
            expiry["health"] = HealthServer(lambda: readiness(worker), host=settings.health_host, port=settings.health_port, metrics=traces.telemetry.scrape)
            await expiry["health"].start()
        await wait_for_topics(lambda: ensure_topics(settings), expiry.get("health"))  # missing: not ready, wait
        await wait_until_allowed(lambda: evicting_store(store, settings), expiry.get("health"), resumed="Redis no longer evicts: starting")
        committed, counts = await committed_witness(settings)
        await store.claim_epoch(lost=committed, witnessed=counts)
        await warn_unless_durable(store)
        try:
            worker.normalizer.limits = await output_limits(settings)
        except Exception as exc:  # the defaults are Kafka's own: a worker still starts, and says so
            log.warning("could not read the output topics' max.message.bytes (%s): assuming Kafka's default", type(exc).__name__)
        # linger_ms=0: the outbox hands over batches that are built already
        worker.producer = AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap_servers, linger_ms=0, **DURABLE, **client_kwargs()
        )
        await worker.producer.start()
        worker.outbox = await open_outbox(worker.producer)

    @app.after_startup
    async def _start_expiry() -> None:
        for subscriber in broker.subscribers:  # readiness knows the consumer before the first poll
            worker.consumer = worker.consumer or getattr(subscriber, "consumer", None)
        expiry["task"] = asyncio.create_task(health_forever())
        expiry["beat"] = asyncio.create_task(tick_forever())

    @app.on_shutdown
    async def _stop() -> None:
        for name in ("task", "beat"):
            task = expiry.pop(name, None)
            if task is not None:
                task.cancel()
        health = expiry.pop("health", None)
        if health is not None:
            await health.stop()
        await worker.drain()  # the polls in flight commit (or fail) before the clients close
        await store.aclose()
        if worker.producer is not None:
            await worker.producer.stop()

    @app.after_shutdown
    async def _flush_telemetry() -> None:
        traces.shutdown()

    return app, worker


async def _parse_raw(records: tuple[Any, ...], original: Any) -> KafkaMessage:
    """FastStream's batch parser without its header decoding: the handler gets the raw aiokafka
    records, header values as bytes (or ``None``), and the core judges them.

    FastStream's ``AioKafkaBatchParser.parse_batch`` decodes every header value of every record
    as UTF-8 before any of our code runs; one non-UTF-8 (or null) header value raised there and
    the whole poll — up to ``RW_MAX_BATCH`` records of many runs — was dropped without a dead
    letter, and later commits moved past it. The framework's parser is still used, for the
    message it builds (and the consumer it carries), but on header-less copies; the originals
    go on as ``raw_message``, which is all the handler reads. Only the first and the last record
    are handed to it (the message id names their offsets; the bodies it would collect go unread):
    a header-less copy of every record cost a dataclass copy per record on the hot path."""
    ends = records if len(records) <= 2 else (records[0], records[-1])
    message: KafkaMessage = await original(tuple(dataclasses.replace(r, headers=()) for r in ends))
    message.raw_message = records
    return message


class Polled(NamedTuple):
    """A poll as the handler's body: aiokafka's records and the consumer that fetched them."""

    records: tuple[Any, ...]
    consumer: Any


async def _polled(msg: KafkaMessage) -> Polled:
    """The handler's one argument: the poll's raw records and its consumer, not a decoded body.

    The raw bodies are provider bytes the translator parses itself: never JSON-decode them
    twice. And a handler that asks for the message as a second parameter (``msg:
    KafkaMessage``) makes FastStream's dependency injection resolve a context field, which
    fast_depends does by a sync call in anyio's worker thread: a thread hop (queue, wake-up,
    result back through the loop) on every poll. Here we step past the framework's context
    injection for that reason; the subscriber, its parser and the consumer stay FastStream's.

    Not the message itself: FastStream caches the decoded body *in* the message, and a
    message holding itself is a reference cycle — every poll's message and its 200 records
    then waited for the garbage collector (10 000 records freed per full collection at 1 200
    records/s) instead of going when the poll did."""
    raw = msg.raw_message
    return Polled(raw if isinstance(raw, tuple) else (raw,), msg.consumer)  # type: ignore[attr-defined]


def _raw_record(record: Any) -> RawRecord:
    """The consumed record as the core takes it; headers as aiokafka gives them (not copied)."""
    return RawRecord(record.key, record.value, record.headers or (), record.partition, record.offset, record.timestamp)


def run(settings: WorkerSettings | None = None) -> None:
    """``reasonwire worker normalize``: run until SIGINT/SIGTERM."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    install_log_throttle()  # aiokafka logs every failed connection attempt
    log.info("core and translators: %s (workers/ops/native.py)", native.status())
    app, _ = create_app(settings)
    app.after_startup(tune_gc)  # the process's own: not in create_app, which tests run inside pytest
    with topics_admin.start_failures(log):
        asyncio.run(app.run())


class _HandOver(ConsumerRebalanceListener):  # type: ignore[misc]
    """Drops the runs of revoked partitions so a stale copy never acts for the new owner."""

    def __init__(self) -> None:
        self.worker: NormalizerWorker | None = None

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if self.worker is not None:
            await self.worker.forget(list(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """Runs are restored lazily from their journal on their next record; the store's write
        count is judged against what the group committed (:func:`~reasonwire.workers.services.startup.adopt_committed_witness`)
        before the machine reads the partitions' open runs (those no record will bring back)."""
        worker = self.worker
        if worker is not None and assigned:
            for subscriber in worker.broker.subscribers:  # the first assignment comes before the first poll
                worker.consumer = worker.consumer or getattr(subscriber, "consumer", None)
            await adopt_committed_witness(worker.settings, worker.store)
            worker._take(worker.machine.assigned(await committed_offsets(worker.consumer, assigned)))
