"""The normalizer worker: ``reasoning.raw.v1`` → translators → Redis and downstream topics.

A thin FastStream adapter around two sans-I/O objects that make every decision: the core
(:class:`reasonwire.workers.core.normalizer.Normalizer`: what each record means) and the
delivery machine (:class:`reasonwire.workers.core.delivery_machine.DeliveryMachine`: what to
read, send, write, close, commit or rewind, and when — at least once, one number one event,
docs/operations.md "Delivery and recovery"). The adapter feeds the machine each poll and the
outcome of each action, and performs the actions it returns: journal reads, writes and ended
markers against :class:`~reasonwire.workers.io.store.ArtefactStore`, sends through
:class:`~reasonwire.workers.io.outbox.Outbox`, commits and seeks on the subscriber's consumer
(``AckPolicy.MANUAL``). What only a process can know stays here: the broker's high watermarks
(the machine's stream clock), event-loop stalls, the backoff after a failure and the health it
reports, logs, and the traces of :mod:`reasonwire.workers.ops.telemetry.normalizer`, whose guards
keep content out of spans, metrics and logs (P8, docs/telemetry.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from faststream import AckPolicy, FastStream
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage

from reasonwire.contracts import topics
from reasonwire.contracts.policy import PolicyBook
from reasonwire.contracts.topic_plan import plan
from reasonwire.workers.ops import handoff
from reasonwire.workers.ops import native
from reasonwire.workers.io import topics_admin
from reasonwire.workers.core.actions import (
    Acknowledged, Action, Adopted, BackedOff, Close, Commit, FailureKind, Forgot, Probe, ReadJournals, ReadOpenRuns, RecoverStore, Recovered, Retired,
    Seek, Send, Stepped, Write,
)
from reasonwire.workers.core.backoff import Backoff, Degradation, Report
from reasonwire.workers.core.delivery import DEFAULT_MAX_MESSAGE_BYTES, DeadLetterCode, OutputLimits
from reasonwire.workers.core.delivery_machine import DeliveryMachine
from reasonwire.workers.core.fence import witnessed
from reasonwire.workers.core.normalizer import DeadLetter, Normalizer, RawRecord, RunInput, Step
from reasonwire.workers.ops.gc_pause import collection_paused
from reasonwire.workers.ops.retry import jitter
from reasonwire.workers.ops.health import HealthServer, HealthMetrics, RepeatGate, classify, held_back_note, install_log_throttle, wait_for_topics, wait_until_allowed
from reasonwire.workers.io.kafka_security import broker_security, client_kwargs, servers
from reasonwire.workers.io.outbox import Outbox
from reasonwire.workers.io.redis_connect import connect, redis_wait
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.store import ArtefactStore, RunsMoved, StoreLost
from reasonwire.workers.ops.telemetry import Telemetry, setup_telemetry
from reasonwire.workers.ops.telemetry.normalizer import NormalizerTelemetry
from reasonwire.workers.io.topics_admin import replication_factor
from reasonwire.workers.translators import translator_for

log = logging.getLogger("reasonwire.normalize")


_performing: ContextVar[Action | None] = ContextVar("rw_performing", default=None)
"""The machine's action being performed (tests check every I/O call happens inside one)."""


class NormalizerWorker:
    """The adapter: performs what :class:`~reasonwire.workers.core.delivery_machine.DeliveryMachine`
    returns, reports every outcome back, and decides nothing about delivery itself.

    Each I/O action runs as its own task (a poll's journal read, its sends, its Redis write, the
    ended markers, the commit), so the I/O of several polls overlaps as the machine allows;
    sends are appended synchronously, in the order returned, to the :class:`Outbox`. What stays
    here is what only a process can know: the broker's assignment and high watermarks (fed to
    the machine's stream clock), the event loop's stalls, the backoff after a failure and the
    health it reports, logs, metrics and traces.
    """

    def __init__(self, settings: WorkerSettings, broker: KafkaBroker, store: ArtefactStore, telemetry: NormalizerTelemetry) -> None:
        self.settings = settings
        self.broker = broker
        self.store = store
        self.telemetry = telemetry
        self.normalizer = Normalizer(PolicyBook.load(settings.policy_file), translators=translator_for)
        self.normalizer.token = secrets.token_hex(4)  # this process's name in the journal heads it writes (the fence)
        self.normalizer.clock.step = expiry_interval(settings)
        self.machine = DeliveryMachine(
            self.normalizer, max_in_flight=settings.max_in_flight, timeout_s=settings.inactivity_timeout_s, expiry_every_s=expiry_interval(settings),
            backoff=Backoff(settings.backoff_initial_s, settings.backoff_max_s, rng=jitter()), check_invariants=settings.debug_invariants,
        )
        self.producer: AIOKafkaProducer | None = None
        self.outbox: Outbox | None = None
        self.consumer: AIOKafkaConsumer | None = None
        """The subscriber's consumer (known from the first poll): commits and rewinds go through it."""
        self.stats: dict[str, int] = {"records": 0, "events": 0, "artefacts": 0, "dead_letters": 0, "skipped": 0, "store_lost": 0}
        self._traces: dict[int, Any] = {}
        """Flight → its batch trace (telemetry), from the poll to its retirement."""
        self._polled: dict[int, float] = {}
        """Flight → ``time.perf_counter()`` when its poll reached :meth:`handle` (the hand-off
        timing of workers/ops/handoff.py; expiry flights have none)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        self._last_error: BaseException | None = None
        """The exception of the failure being reported (logged with the machine's :class:`BackedOff`)."""
        # -- health: one log line per state change (the backoff itself is the machine's)
        self.degradation = Degradation()
        self.health_metrics = HealthMetrics(telemetry.telemetry)
        self.repeats = RepeatGate()
        """Per-record WARNING lines (translator warnings, dead letters): one per kind per minute."""

    @property
    def closing(self) -> bool:
        return self.machine.closing

    # -- inputs: what happened -----------------------------------------------------------

    async def handle(self, records: Sequence[RawRecord]) -> None:
        """Feed one poll to the machine; returns once it is stepped (its writes in flight)."""
        polled = time.perf_counter()  # poll → hand-off to the producer (workers/ops/handoff.py)
        self.tick()  # a stall is noticed before the poll is stepped
        await self._until(lambda: self.machine.accepting or self.closing)
        await self._wait_for_retry()
        await self._until(lambda: self.machine.accepting or self.closing)
        records = self.machine.fresh(records)
        if self.closing or not records:
            return  # not committed: redelivered to whoever consumes next (or stale: fetched before a rewind)
        with collection_paused():  # stepped and handed over without a collection in between (issue 27 item 3)
            actions = self.machine.poll(records, self._log_ends(records), now=time.monotonic())
            flight = next((a.flight for a in actions if isinstance(a, (Probe, ReadJournals, Stepped))), None)
            if flight is not None:
                self._traces[flight] = self.telemetry.batch(records).__enter__()
                if handoff.recorder.enabled:
                    self._polled[flight] = polled
            self._take(actions)

    def tick(self) -> None:
        """The machine's clock (a few times a second, and before each poll): the stream clock's
        observations, then ``tick(now)`` — stalls, the idle probe and the expiry are its decisions."""
        self._observe_partitions()
        self._take(self.machine.tick(time.monotonic()))

    async def forget(self, partitions: list[TopicPartition]) -> None:
        """Partitions were revoked: what is in flight settles (committed), then their runs go."""
        gone = {tp.partition for tp in partitions if tp.topic == topics.RAW}
        self._take(self.machine.revoke(gone))
        await self._until(lambda: not self.machine.revoking)
        self.telemetry.forget(gone)
        for partition in gone:  # its lag is the new owner's to report
            self.health_metrics.lag.pop(partition, None)

    async def drain(self) -> None:
        """Stop taking polls and wait until every poll in flight is committed or rewound (shutdown)."""
        self._take(self.machine.close())
        await self._until(lambda: self.machine.settled)

    def _observe_partitions(self) -> None:
        """Feed the machine's stream clock (issue 24 item 1): per partition, whether every record
        below the high watermark of the last fetch response has been stepped, and when that
        response came. A worker that was paused, or lags, has no such fresh confirmation, so
        its runs' silence does not grow; an outage counts as not caught up (the machine judges)."""
        consumer = self.consumer
        if consumer is None:
            return
        for tp in consumer.assignment():
            if tp.topic != topics.RAW:
                continue
            fetched = consumer.last_poll_timestamp(tp)
            self.machine.observe(tp.partition, high=consumer.highwater(tp), fetched_at=fetched / 1000 if fetched else None)

    def _log_ends(self, records: Sequence[RawRecord]) -> dict[int, int | None]:
        """The broker's log end of each partition of this poll the machine has not met (see
        :meth:`DeliveryMachine.poll`)."""
        consumer = self.consumer
        if consumer is None:
            return {}
        knows = self.normalizer.knows
        return {p: consumer.highwater(TopicPartition(topics.RAW, p)) for p in {r.partition for r in records} if not knows(p)}

    # -- outputs: performing the machine's actions --------------------------------------

    def _take(self, actions: Sequence[Action]) -> None:
        """Perform the machine's answer, in its order: notifications at once, sends appended to
        the outbox at once (order), every other I/O action as a task that reports back."""
        for action in actions:
            if isinstance(action, Send):
                self._send(action)
            elif isinstance(action, Stepped):
                self._stepped(action)
            elif isinstance(action, Acknowledged):
                trace = self._traces.get(action.flight)
                if trace is not None:
                    trace.acknowledged()  # the end of the records' end-to-end delay (telemetry)
            elif isinstance(action, Retired):
                self._retired(action)
            elif isinstance(action, Seek):
                self._seek(action)
            elif isinstance(action, Forgot):
                self._forgot(action)
            elif isinstance(action, Adopted):
                log.info("%d open runs of this worker's partitions taken up from the store, to end them if their producer vanished", action.runs)
            elif isinstance(action, BackedOff):
                self._note_failure(self._last_error or RuntimeError("failed"), action.delay_s)
            elif isinstance(action, Recovered):
                self._log(self.degradation.succeeded(time.monotonic()))
            else:
                self._spawn(self._perform(action))
        self._wake()

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _perform(self, action: Action) -> None:
        """One I/O action, its outcome reported to the machine (never raises)."""
        _performing.set(action)
        try:
            if isinstance(action, ReadJournals):
                loaded = dict(zip(action.runs, await self.store.load_journals(list(action.runs)), strict=True))
                with collection_paused():  # the poll's new runs are stepped here
                    self._take(self.machine.journals_read(action, loaded, doubtful=self.store.loss_window()))
                return
            if isinstance(action, ReadOpenRuns):
                self._take(self.machine.open_runs_read(action, await self.store.open_runs(action.partitions)))
                return
            await self._io(action)
        except Exception as exc:
            self._take(self._failed(action, exc))
        else:
            self._take(self.machine.done(action))
            if isinstance(action, Commit) and not action.membership:
                self._note_lag(action.offsets)

    async def _io(self, action: Action) -> None:
        if isinstance(action, Write):
            self.stats["artefacts"] += await self.store.apply(action.steps, action.opened)
        elif isinstance(action, Close):
            await self.store.close_runs(action.steps)  # only after the outputs are acknowledged
        elif isinstance(action, Commit):
            assert self.consumer is not None
            # the store's write count beside each offset: the witness a restored store is judged by
            metadata = self.store.witness.metadata()
            await self.consumer.commit({TopicPartition(topics.RAW, p): (offset, metadata) for p, offset in action.offsets.items()})
        elif isinstance(action, Probe):
            # after a Redis failure a poll is stepped only once an empty write goes through: its
            # continuing runs' outputs would otherwise go out again on every retry while Redis
            # refuses writes — 1,632 copies in one OOM (issue 24)
            await self.store.probe()
        elif isinstance(action, RecoverStore):
            epoch = await self.store.recover_from_loss()
            log.warning("store lost data: new epoch %s; runs whose journal vanished are not resumed (dead-lettered store_lost)", epoch)
        else:  # pragma: no cover - a new action kind without an adapter
            raise TypeError(f"no adapter for {type(action).__name__}")

    def _failed(self, action: Action, exc: BaseException) -> list[Action]:
        """Tell the machine how ``action`` failed (it decides the backoff: :class:`BackedOff`)."""
        if isinstance(exc, RunsMoved):  # not an outage: no backoff, no degraded state
            log.info("fence: %d runs were written by another worker since (a rebalance or a partition change): copies dropped, poll redone", len(exc.runs))
            return self.machine.failed(action, FailureKind.MOVED, exc.runs)
        if isinstance(action, Commit) and action.membership:
            log.info("expiry held back: the group refused this worker's commit (%s)", type(exc).__name__)
            return self.machine.failed(action, FailureKind.OUTAGE)
        if not self.machine.failing or isinstance(action, RecoverStore):  # the failure an episode's trace and log line name
            self._last_error = exc
        return self.machine.failed(action, FailureKind.STORE_LOST if isinstance(exc, StoreLost) else FailureKind.OUTAGE)

    def _send(self, action: Send) -> None:
        """Append the outputs to the outbox now (their order is the machine's); a task reports
        once the broker acknowledged them all."""
        _performing.set(action)
        try:
            assert self.outbox is not None
            delivered = self.outbox.add(action.outbound)
        except Exception as exc:
            self._take(self._failed(action, exc))
            return
        finally:
            _performing.set(None)
        polled = self._polled.get(action.flight) if self._polled else None
        if polled is not None:  # ``terminal``: after the poll's write (runs that ended, runs not yet confirmed)
            handoff.recorder.handed(polled, action.terminal)
        stats = self.stats
        for out in action.outbound:
            stats["dead_letters" if out.topic == topics.DLQ else "events"] += 1
        self._spawn(self._acknowledged(action, delivered))

    async def _acknowledged(self, action: Send, delivered: list[asyncio.Future[None]]) -> None:
        try:
            for future in delivered:
                await future
        except Exception as exc:
            self._take(self._failed(action, exc))
        else:
            self._take(self.machine.done(action))

    def _stepped(self, action: Stepped) -> None:
        """Register the Steps' content before the store or the broker can quote it (P8), log
        what the records caused."""
        trace = self._traces.get(action.flight)
        if trace is None:  # an expiry's flight
            trace = self._traces[action.flight] = self.telemetry.batch(()).__enter__()
        trace.register([step for _, step in action.items])
        if action.complete:
            trace.stepped(self.machine.steps_of(action.flight), registered=True)
        for item, step in action.items:
            if step.warnings or step.dead_letter is not None or step.skipped:  # most records: nothing to say
                self._log_step(item, step)

    def _retired(self, action: Retired) -> None:
        self._polled.pop(action.flight, None)
        trace = self._traces.pop(action.flight, None)
        if action.committed:
            self.stats["records"] += action.records
        if trace is None:
            return
        failure = None if action.committed else (self._last_error or RuntimeError("rewound"))  # rewound: its records come again
        try:
            trace.__exit__(type(failure) if failure else None, failure, None)
        except Exception as exc:  # a telemetry bug must not stop delivery: the rest of this answer still runs
            self._warn_repeating(("telemetry", type(exc).__name__), "telemetry: closing a poll's trace failed (%s)", type(exc).__name__)

    def _seek(self, action: Seek) -> None:
        """Rewind the consumer (only partitions still assigned: a revoked one is the new owner's)."""
        consumer = self.consumer
        if consumer is None:
            return
        assigned = consumer.assignment()
        _performing.set(action)
        try:
            for partition, offset in action.offsets.items():
                tp = TopicPartition(topics.RAW, partition)
                if tp in assigned:
                    consumer.seek(tp, offset)
        finally:
            _performing.set(None)
        self._last_error = None

    def _forgot(self, action: Forgot) -> None:
        if action.why == "revoked":
            log.info("partitions revoked: %d open runs handed over", action.runs)
        elif action.why == "stall":
            log.info("the event loop stood still for a while: %d open runs dropped, restored from their journals on their next record", action.runs)
        elif action.why == "store_lost":
            log.info("store lost: %d open runs dropped", action.runs)

    async def _until(self, condition: Any) -> None:
        """Wait until ``condition()`` holds (re-checked whenever the machine answered)."""
        while not condition():
            changed = self._changed
            await changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- logs for what records caused ------------------------------------------------------

    def _log_step(self, item: DeadLetter | RunInput | None, step: Step) -> None:
        """Codes and exception types only: never a record's content (P8)."""
        if isinstance(item, DeadLetter):
            record = item.record
            self._warn_repeating(
                ("dead_letter", item.code), "dead-lettered raw record at partition %d offset %d (%s): %s",
                record.partition, record.offset, item.code, item.reason,
            )
            return
        if item is None:
            return
        for warning in step.warnings:  # content-free by construction (P8); counted by the metrics
            self._warn_repeating(
                ("warning", item.envelope.grammar, warning.code), "run %s line %d: %s", item.envelope.run_id, warning.line, warning.message
            )
        if step.dead_letter is DeadLetterCode.STORE_LOST and step.run is None:
            self.stats["store_lost"] += 1
            log.debug("run %s rw-seq %d: journal lost with the store; dead-lettered", item.envelope.run_id, item.envelope.seq)
        elif step.dead_letter is not None:
            record = item.record
            line = "run %s: record at partition %d offset %d dead-lettered (%s)%s"
            args = (item.envelope.run_id, record.partition, record.offset, step.dead_letter, f" after {step.error}" if step.error else "")
            if step.dead_letter is DeadLetterCode.RUN_ENDED:
                # a late record is counted (metrics, DLQ), not logged at WARNING: a producer that
                # keeps sending after its run ended must not flood the log
                log.debug(line, *args)
            else:
                self._warn_repeating(("dead_letter", step.dead_letter), line, *args)
        if step.skipped:
            self.stats["skipped"] += 1
            # normal operation (the ingress's end record after the provider's own end): not INFO per run
            log.debug("run %s: record skipped (%s)", item.envelope.run_id, step.skipped)

    def _warn_repeating(self, kind: Any, line: str, *args: Any) -> None:
        """A WARNING that one record causes: logged once per ``kind`` a minute, the next one saying
        how many were held back (:class:`~reasonwire.workers.ops.health.RepeatGate`); the metrics count all."""
        held = self.repeats.admit(kind)
        if held is not None:
            log.warning(line + "%s", *args, held_back_note(held))

    # -- health: backoff, state-change logging (issue 13) ------------------------------------

    def _note_failure(self, exc: BaseException, delay: float) -> None:
        """Count the failure the machine backed off after, and log only on a state change (or the
        periodic summary): a retry per poll logged a traceback per poll."""
        failure = classify(exc)
        self.health_metrics.failed(failure)
        self.health_metrics.retried(failure)
        if isinstance(exc, StoreLost):
            self.health_metrics.store_lost.add(1)
        self._log(self.degradation.failed(failure, time.monotonic(), delay), exc)

    def _note_lag(self, offsets: Mapping[int, int]) -> None:
        """A commit went through: each partition's lag behind the broker's high watermark."""
        consumer = self.consumer
        for partition, committed in offsets.items():
            high = consumer.highwater(TopicPartition(topics.RAW, partition)) if consumer is not None else None
            if high is not None:
                self.health_metrics.lag[partition] = high - committed

    async def tick_health(self) -> None:
        """Called by the periodic task: is the broker reachable (a metadata request; nothing else
        notices an outage when no poll is in flight), and the summary line while degraded. Also
        hands the summed counts of the last committed polls to the metrics SDK: they wait for a
        second (``NormalizerTelemetry.metric_flush_s``), and without a later poll only this tick
        would ever flush them."""
        self.telemetry.flush_counts()
        self._take(self.machine.broker_answered(await self.broker_answers() == "ok"))
        self._log(self.degradation.summary(time.monotonic()))

    async def broker_answers(self) -> str:
        """``"ok"``, or the type name of the failure of a metadata request (2 s at most): the
        health tick and ``/readyz`` ask the broker the same way."""
        try:
            assert self.producer is not None
            await asyncio.wait_for(self.producer.client.fetch_all_metadata(), 2.0)
        except Exception as exc:
            return type(exc).__name__
        return "ok"

    async def _wait_for_retry(self) -> None:
        """Sleep out the machine's backoff (fetching stops meanwhile: < 1 % of a core)."""
        delay = self.machine.retry_at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    def _log(self, report: Report | None, exc: BaseException | None = None) -> None:
        if report is not None:
            level = {"info": logging.INFO, "warning": logging.WARNING}.get(report.level, logging.ERROR)
            log.log(level, "%s", report.message, exc_info=exc if report.traceback else None)

    @property
    def ready(self) -> dict[str, Any]:
        """The worker's own part of ``/readyz`` (the probes add Redis and the broker)."""
        return {
            "degraded": self.degradation.cause if self.degradation.degraded else None,
            "consumer_started": self.consumer is not None,
            "partitions": sorted(tp.partition for tp in self.consumer.assignment()) if self.consumer is not None else [],
            "store_epoch": self.store.epoch,
            "store_lost_ms": self.store.lost_ms,
            "lag": {str(p): n for p, n in sorted(self.health_metrics.lag.items())},
        }

    async def adopt_committed_witness(self) -> None:
        """Partitions were assigned: raise the store's witness to the highest write count the
        group's commits carry for its epoch. At start-up the worker reads them once; a worker
        that has been running since then knows only the counts its own writes saw, so a store
        restored to a copy taken after its last write — but before the writes of a worker that
        died and whose partitions it now takes over — would pass (issue 24). One admin request
        per rebalance; if it fails, the check waits for the worker's own writes, as before."""
        try:
            _, counts = await asyncio.wait_for(committed_witness(self.settings), 5.0)
        except Exception as exc:
            log.info("could not read the group's committed store write counts (%s)", type(exc).__name__)
            return
        witness = self.store.witness
        if witness.epoch is not None:
            witness.saw(counts.get(witness.epoch))

    async def committed_offsets(self, partitions: list[TopicPartition]) -> dict[int, int | None]:
        """The group's committed offset of each partition (``None``: none, or not readable now —
        the expiry then waits for this worker's own first commit there)."""
        consumer, out = self.consumer, {}
        for tp in partitions:
            try:
                out[tp.partition] = await asyncio.wait_for(consumer.committed(tp), 5.0) if consumer is not None else None
            except Exception:
                out[tp.partition] = None
        return out

    async def start_outbox(self) -> None:
        """The producer's partitions of every output topic, read once (a run keeps its partition)."""
        assert self.producer is not None
        partitions = {topic: sorted(await self.producer.partitions_for(topic)) for topic in topics.ALL if topic != topics.RAW}
        self.outbox = Outbox(self.producer, partitions)


class _HandOver(ConsumerRebalanceListener):  # type: ignore[misc]
    """Drops the runs of revoked partitions so a stale copy never acts for the new owner."""

    def __init__(self) -> None:
        self.worker: NormalizerWorker | None = None

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if self.worker is not None:
            await self.worker.forget(list(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """Runs are restored lazily from their journal on their next record; the store's write
        count is judged against what the group committed (:meth:`NormalizerWorker.adopt_committed_witness`)
        before the machine reads the partitions' open runs (those no record will bring back)."""
        worker = self.worker
        if worker is not None and assigned:
            await worker.adopt_committed_witness()
            worker._take(worker.machine.assigned(await worker.committed_offsets([tp for tp in assigned if tp.topic == topics.RAW])))


async def ensure_topics(settings: WorkerSettings) -> dict[str, int]:
    """The normalizer's topics as the plan has them (contracts/topic_plan.py: partitions
    ``RW_PARTITIONS``, replicas ``RW_REPLICATION_FACTOR``, retention, cleanup policy): created
    only with ``RW_CREATE_TOPICS=true`` — else checked, and :class:`~reasonwire.workers.io.topics_admin.TopicsMissing`
    names every absent one. Returns every topic's actual partition count."""
    specs = [s for s in plan(settings.partitions, replication_factor()) if s.name in topics.ALL]
    return await topics_admin.ensure(settings.kafka_bootstrap_servers, specs, create=topics_admin.create_enabled())


async def output_limits(settings: WorkerSettings, max_request_size: int = DEFAULT_MAX_MESSAGE_BYTES) -> OutputLimits:
    """The largest record each output topic takes: its ``max.message.bytes`` (read once, at
    start-up), capped by the producer's ``max.request.size``. The core checks every output
    against it before sending, so an oversized output ends its run (``too_large``) instead of
    failing the poll on every retry. A topic whose config cannot be read keeps Kafka's default."""
    admin = topics_admin.admin_client(settings.kafka_bootstrap_servers)
    await admin.start()
    limits: dict[str, int] = {}
    try:
        resources = [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics.ALL if t != topics.RAW]
        for response in await admin.describe_configs(resources):
            for error_code, _, _, name, entries in response.resources:
                value = next((e[1] for e in entries if e[0] == "max.message.bytes"), None) if not error_code else None
                if value is not None and str(value).isdigit():
                    limits[name] = min(int(value), max_request_size)
    finally:
        await admin.close()
    return OutputLimits(default=max_request_size, per_topic=limits)


async def committed_witness(settings: WorkerSettings) -> tuple[bool, dict[str, int]]:
    """Whether the consumer group committed offsets before — then a store without an epoch is a
    store that lost its data, not a new one — and the highest store write count in the commits'
    metadata, per store epoch id: a store below the count of its own id was restored from an
    older copy (docs/reliability.md)."""
    admin = topics_admin.admin_client(settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(settings.group_id)
    except Exception:  # no such group yet (or an old broker): nothing was committed
        return False, {}
    finally:
        await admin.close()
    return bool(offsets), witnessed(committed.metadata for committed in offsets.values())


async def group_has_offsets(settings: WorkerSettings) -> bool:
    """Whether the consumer group committed offsets before (:func:`committed_witness`)."""
    return (await committed_witness(settings))[0]


EVICTING_POLICIES_OK = ("noeviction",)
"""The ``maxmemory-policy`` values that never drop a key to make room."""


async def refuse_evicting_store(store: ArtefactStore, settings: WorkerSettings) -> str | None:
    """Why the worker must not run on this Redis, or ``None`` (issue 24 item 5).

    A Redis that evicts (``allkeys-*``, or ``volatile-*``: every journal and artefact has a
    TTL) drops open runs' journals and stored artefacts without a word: a run resumed from a
    journal that lost entries would be renumbered, and a replay would miss artefacts of runs
    reported finished. Accepted only when the operator says the store is dedicated to
    reasonwire and sized so ``maxmemory`` is never reached (``RW_REDIS_DEDICATED=true``).
    Managed Redis that refuses ``CONFIG`` is not judged (a warning says so)."""
    try:
        policy = (await store.redis.config_get("maxmemory-policy")).get("maxmemory-policy")
    except Exception:
        log.warning("could not read Redis's maxmemory-policy: make sure it is noeviction (docs/reliability.md)")
        return None
    if policy is None or policy in EVICTING_POLICIES_OK or settings.redis_dedicated:
        return None
    return (
        f"Redis maxmemory-policy is {policy}: it may evict open runs' journals and stored artefacts; set it to noeviction, "
        "or set RW_REDIS_DEDICATED=true if this Redis is dedicated to reasonwire and sized never to reach maxmemory"
    )


async def evicting_store(store: ArtefactStore, settings: WorkerSettings) -> tuple[str, dict[str, str]] | None:
    """:func:`refuse_evicting_store` as a start-up obstacle: the worker waits not ready until
    the policy changes (``CONFIG SET maxmemory-policy noeviction`` needs no restart)."""
    refusal = await refuse_evicting_store(store, settings)
    return None if refusal is None else (refusal, {"store_refused": refusal})


def expiry_interval(settings: WorkerSettings) -> float:
    """Seconds between expiry ticks: a quarter of the inactivity timeout, between 0.05 and 5."""
    return max(0.05, min(settings.inactivity_timeout_s / 4, 5.0))


def metadata_max_age_ms(settings: WorkerSettings) -> int:
    """How old the consumer's view of the raw topic may grow: an eighth of the inactivity
    timeout, between 1 and 30 s. Partitions added to the raw topic are read only once the group
    rebalances, which its leader starts when its metadata shows them; with aiokafka's default
    (5 min, the default timeout too) runs whose ingress moved to a new partition went silent
    on the old one for longer than the timeout and were ended ``inactivity_timeout`` (make
    chaos ``raw_partitions``). One small metadata request per interval and worker."""
    return int(1000 * max(1.0, min(settings.inactivity_timeout_s / 8, 30.0)))


async def warn_unless_durable(store: ArtefactStore) -> None:
    """Say at start when Redis would lose acknowledged writes on a crash (no AOF, or
    ``appendfsync`` other than ``always``); managed Redis may refuse ``CONFIG``: then say nothing."""
    try:
        config = await store.redis.config_get("append*")
    except Exception:
        return
    appendonly, fsync = config.get("appendonly"), config.get("appendfsync")
    if appendonly != "yes" or fsync != "always":
        log.warning(
            "Redis persistence is appendonly=%s appendfsync=%s: a Redis crash can lose artefacts of runs already "
            "reported finished (docs/reliability.md recommends appendonly yes, appendfsync always)", appendonly, fsync
        )


async def readiness(worker: NormalizerWorker) -> dict[str, Any]:
    """``/readyz``: Redis answers, the broker answers, the worker is not degraded, its consumer runs."""
    body: dict[str, Any] = dict(worker.ready)
    try:
        await asyncio.wait_for(worker.store.redis.ping(), 1.0)
        body["redis"] = "ok"
    except Exception as exc:
        body["redis"] = type(exc).__name__
    body["kafka"] = await worker.broker_answers()
    body["ready"] = body["redis"] == "ok" and body["kafka"] == "ok" and body["degraded"] is None and body["consumer_started"]
    return body


def create_app(settings: WorkerSettings | None = None, telemetry: Telemetry | None = None) -> tuple[FastStream, NormalizerWorker]:
    """The app and its worker; ``telemetry`` defaults to :func:`setup_telemetry` (``OTEL_*``)."""
    settings = settings or WorkerSettings.from_env()
    traces = NormalizerTelemetry(telemetry or setup_telemetry(), group_id=settings.group_id, metric_flush_s=1.0)
    # acks=all + idempotence: on a replicated cluster a broker lost mid-stream loses no output
    # (min.insync.replicas=2 of 3) and a retried send is not written twice
    broker = KafkaBroker(
        servers(settings.kafka_bootstrap_servers), log_level=logging.DEBUG, acks="all", enable_idempotence=True, linger_ms=2, security=broker_security(),
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
        # write, produce request, commit) is paid per few (issue 27, docs/operations.md)
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
            worker.tick()
            await asyncio.sleep(0.25)

    async def health_forever() -> None:
        interval = expiry_interval(settings)
        while True:
            await asyncio.sleep(interval)
            try:
                await worker.tick_health()
            except Exception as exc:  # a bug here must not stop the health loop: say it once per kind
                worker._warn_repeating(("health", type(exc).__name__), "health tick failed (%s)", type(exc).__name__)

    app = FastStream(broker, logger=log)

    @app.on_startup
    async def _topics() -> None:
        if settings.health_port:  # first: /readyz says what the worker waits for (issue 23 item 2); /metrics
            expiry["health"] = HealthServer(lambda: readiness(worker), port=settings.health_port, metrics=traces.telemetry.scrape)
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
        # linger_ms=0: the outbox hands over batches that are built already (issue 27); acks=all +
        # idempotence: on a replicated cluster a broker lost mid-stream loses no output
        worker.producer = AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap_servers, acks="all", enable_idempotence=True, linger_ms=0, **client_kwargs()
        )
        await worker.producer.start()
        await worker.start_outbox()

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
    install_log_throttle()  # aiokafka logs every failed connection attempt (issue 13, finding 4)
    log.info("core and translators: %s (workers/ops/native.py)", native.status())
    app, _ = create_app(settings)
    app.after_startup(tune_gc)  # the process's own: not in create_app, which tests run inside pytest
    with topics_admin.start_failures(log):
        asyncio.run(app.run())


GC_GEN0_THRESHOLD = 20_000
"""Container allocations (net of frees) between two young collections; CPython's default is 700."""


def tune_gc() -> None:
    """Keep the garbage collector off the CPU and out of the latency tail (issues 17 and 27).

    Once started, the worker holds ~90 000 long-lived objects (modules, translators' tables,
    clients). CPython's full collection walks all of them: 0.1–0.5 s paused twice per ~30 000
    raw records with the default thresholds. After start-up everything alive is moved out of
    the collector's sight (``gc.freeze``: never scanned, never freed — it lives as long as the
    process anyway).

    Young collections come every 20 000 net allocations. A record's garbage is freed by
    reference counting (a live drain of 43 000 raw records left ~800 objects in cycles), so
    a collection finds almost nothing and costs what it examines: the young objects still
    alive, i.e. the polls in flight. Stepping a poll allocates a few thousand such objects at
    once (:func:`~reasonwire.workers.ops.gc_pause.collection_paused`), so at 2 000 nearly every
    poll ended with a young collection over its own fresh objects and every tenth with a
    middle one over ten polls' worth (5–34 ms): 250–290 young and 26–36 middle collections,
    ~0.5 s or ~12 µs per raw record, ~12 % of the worker's CPU (py-spy, issue 27). At 20 000
    the allocations of one poll are mostly freed again (its retirement decrements the count)
    before the next poll adds its own, so the count reaches the threshold only as objects
    accumulate: 13 young collections (p50 ~7 ms, max 20 ms) and 1 middle one in the same
    drain, ~0.13 s. (Before the poll's message stopped being a reference cycle, every poll's
    200 records waited in the young generation and a collection at 20 000 took 37–130 ms:
    the "fourth pass" of docs/benchmarks-history.md, which lowered it to 2 000 then.)"""
    gc.collect()
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, GC_GEN0_THRESHOLD), gen1, gen2)
