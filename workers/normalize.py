"""The normalizer worker: ``reasoning.raw.v1`` → translators → Redis and downstream topics.

A thin FastStream adapter around :class:`workers.core.normalizer.Normalizer`; every
decision lives there. Per poll (a batch of raw records): route and translate
each record, write artefacts and journal entries in one Redis transaction,
publish the outputs and wait for the broker's acknowledgement, close the runs
that ended (journal dropped, ended marker set), then let FastStream commit the
offsets (``AckPolicy.NACK_ON_ERROR``: an infrastructure
failure rewinds to the batch's first record and retries; bad input never
raises — it is dead-lettered). Offsets are therefore committed only after a
record's outputs and Redis writes are done: at least once. Each poll is traced
and counted by :mod:`workers.telemetry.normalizer`, whose guards keep content
out of spans, metrics and logs (P8, docs/telemetry.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from faststream import AckPolicy, FastStream
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from redis.asyncio import Redis

from contracts import topics
from contracts.policy import PolicyBook
from workers.core.normalizer import DeadLetter, JournalEntry, Normalizer, RawRecord, RunInput, RunKey, Step, dead_letter
from workers.settings import WorkerSettings
from workers.store import ArtefactStore
from workers.telemetry import Telemetry, setup_telemetry
from workers.telemetry.normalizer import NormalizerTelemetry

log = logging.getLogger("reasonwire.normalize")


class NormalizerWorker:
    """Owns the run table, the store and the broker for one worker process."""

    def __init__(self, settings: WorkerSettings, broker: KafkaBroker, store: ArtefactStore, telemetry: NormalizerTelemetry) -> None:
        self.settings = settings
        self.broker = broker
        self.store = store
        self.telemetry = telemetry
        self.normalizer = Normalizer(PolicyBook.load(settings.policy_file))
        self.lock = asyncio.Lock()
        self.producer: AIOKafkaProducer | None = None
        self.stats: dict[str, int] = {"records": 0, "events": 0, "artefacts": 0, "dead_letters": 0, "skipped": 0}

    async def handle(self, records: Sequence[RawRecord]) -> None:
        async with self.lock:
            with self.telemetry.batch(records) as trace:
                try:
                    routed = [self.normalizer.route(record) for record in records]
                    journals = await self._journals_needed(routed)
                    steps = [await self._step(item, journals) for item in routed]
                    trace.stepped(steps)  # registers the batch's content before Redis or Kafka can quote it (P8)
                    self.stats["artefacts"] += await self.store.apply(steps)
                    await self._publish(steps)
                    await self.store.close_runs(steps)
                except Exception:
                    # The core already advanced these runs in memory; the redelivered poll would
                    # skip its records as duplicates. Drop them: they are restored from the journal.
                    self.normalizer.forget_partitions({record.partition for record in records})
                    raise
                self.stats["records"] += len(records)

    async def expire_idle_runs(self) -> None:
        """Close runs whose ingress vanished (RUN_ERROR code ``inactivity_timeout``)."""
        async with self.lock:
            with self.telemetry.batch(()) as trace:
                steps = self.normalizer.expire(timeout_s=self.settings.inactivity_timeout_s)
                trace.stepped(steps)
                if steps:
                    await self.store.apply(steps)
                    await self._publish(steps)
                    await self.store.close_runs(steps)

    async def forget(self, partitions: list[TopicPartition]) -> None:
        async with self.lock:
            revoked = [tp.partition for tp in partitions if tp.topic == topics.RAW]
            dropped = self.normalizer.forget_partitions(revoked)
            self.telemetry.forget(revoked)
        log.info("partitions revoked: %d open runs handed over", dropped)

    async def _journals_needed(self, routed: Sequence[DeadLetter | RunInput]) -> dict[RunKey, tuple[list[JournalEntry], bool]]:
        """The journals of the runs this poll meets without holding them, in one round trip."""
        runs = list(dict.fromkeys(i.run for i in routed if isinstance(i, RunInput) and self.normalizer.needs_restore(i)))
        return dict(zip(runs, await self.store.load_journals(runs), strict=True)) if runs else {}

    async def _step(self, routed: DeadLetter | RunInput, journals: dict[RunKey, tuple[list[JournalEntry], bool]]) -> Step:
        if isinstance(routed, DeadLetter):
            record = routed.record
            log.warning("dead-lettered raw record at partition %d offset %d: %s", record.partition, record.offset, routed.reason)
            return Step(outbound=[dead_letter(routed)])
        if self.normalizer.needs_restore(routed):
            # fetched for this poll, once; a run gone stale mid-poll reads its journal again
            journal, ended = journals.pop(routed.run, None) or await self.store.load_journal(routed.run)
            self.normalizer.restore(routed, journal, ended=ended)
        step = self.normalizer.accept(routed)
        for warning in step.warnings:  # content-free by construction (P8)
            log.warning("run %s line %d: %s", routed.envelope.run_id, warning.line, warning.message)
        if step.skipped:
            self.stats["skipped"] += 1
            # normal operation (the ingress's end record after the provider's own end): not INFO per run
            log.debug("run %s: record skipped (%s)", routed.envelope.run_id, step.skipped)
        return step

    async def _publish(self, steps: Sequence[Step]) -> None:
        pending = []
        send = self.producer.send  # type: ignore[union-attr]
        for step in steps:
            for out in step.outbound:
                pending.append(
                    await send(out.topic, out.value, key=out.key, headers=[(k, v.encode()) for k, v in out.headers.items()])
                )
                self.stats["dead_letters" if out.topic == topics.DLQ else "events"] += 1
        if pending:
            await asyncio.gather(*pending)


class _HandOver(ConsumerRebalanceListener):  # type: ignore[misc]
    """Drops the runs of revoked partitions so a stale copy never acts for the new owner."""

    def __init__(self) -> None:
        self.worker: NormalizerWorker | None = None

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if self.worker is not None:
            await self.worker.forget(list(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """Nothing to do: runs are restored lazily from their journal on their next record."""


async def ensure_topics(settings: WorkerSettings) -> dict[str, int]:
    """Create reasonwire's topics with the configured partition count (FastStream would create 1);
    returns every topic's actual partition count."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [NewTopic(t, settings.partitions, 1) for t in topics.ALL if t not in existing]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(missing)
        described = await admin.describe_topics(list(topics.ALL))
        return {d["topic"]: len(d["partitions"]) for d in described}
    finally:
        await admin.close()


def create_app(settings: WorkerSettings | None = None, telemetry: Telemetry | None = None) -> tuple[FastStream, NormalizerWorker]:
    """The app and its worker; ``telemetry`` defaults to :func:`setup_telemetry` (``OTEL_*``)."""
    settings = settings or WorkerSettings.from_env()
    traces = NormalizerTelemetry(telemetry or setup_telemetry(), group_id=settings.group_id)
    broker = KafkaBroker(settings.kafka_bootstrap_servers, log_level=logging.DEBUG, acks="all", linger_ms=2)
    store = ArtefactStore(
        Redis.from_url(settings.redis_url),
        artefact_ttl_s=settings.artefact_ttl_s,
        journal_ttl_s=settings.journal_ttl_s,
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
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.NACK_ON_ERROR,
        listener=listener,
        decoder=_no_decode,
    )
    async def on_raw(body: Any, msg: KafkaMessage) -> None:
        raw = msg.raw_message if isinstance(msg.raw_message, tuple) else (msg.raw_message,)
        await worker.handle([_raw_record(r) for r in raw])

    expiry: dict[str, asyncio.Task[None]] = {}

    async def expire_forever() -> None:
        interval = max(0.05, min(settings.inactivity_timeout_s / 4, 5.0))
        while True:
            await asyncio.sleep(interval)
            try:
                await worker.expire_idle_runs()
            except Exception:  # an outage must not kill the loop; the next tick retries
                log.exception("closing idle runs failed")

    app = FastStream(broker, logger=log)

    @app.on_startup
    async def _topics() -> None:
        await ensure_topics(settings)
        worker.producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all", linger_ms=2)
        await worker.producer.start()

    @app.after_startup
    async def _start_expiry() -> None:
        expiry["task"] = asyncio.create_task(expire_forever())

    @app.on_shutdown
    async def _stop() -> None:
        task = expiry.pop("task", None)
        if task is not None:
            task.cancel()
        await store.redis.aclose()
        if worker.producer is not None:
            await worker.producer.stop()

    @app.after_shutdown
    async def _flush_telemetry() -> None:
        traces.shutdown()

    return app, worker


async def _no_decode(msg: Any) -> None:
    """The raw bodies are provider bytes the translator parses itself: never JSON-decode them twice."""
    return None


def _raw_record(record: Any) -> RawRecord:
    return RawRecord(
        key=record.key,
        value=record.value,
        headers=tuple((name, value or b"") for name, value in (record.headers or ())),
        partition=record.partition,
        offset=record.offset,
    )


def run(settings: WorkerSettings | None = None) -> None:
    """``reasonwire worker normalize``: run until SIGINT/SIGTERM."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    app, _ = create_app(settings)
    asyncio.run(app.run())
