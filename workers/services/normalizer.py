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
import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from faststream.kafka import KafkaBroker

from reasonwire.contracts import topics
from reasonwire.contracts.policy import PolicyBook
from reasonwire.workers.core.actions import (
    Acknowledged, Action, Adopted, BackedOff, Close, Commit, FailureKind, Forgot, Probe, ReadJournals, ReadOpenRuns, RecoverStore, Recovered, Retired,
    Seek, Send, Stepped, Write,
)
from reasonwire.workers.core.backoff import Backoff, Degradation, Report
from reasonwire.workers.core.delivery import DeadLetterCode
from reasonwire.workers.core.delivery_machine import DeliveryMachine
from reasonwire.workers.core.normalizer import DeadLetter, Normalizer, RawRecord, RunInput, Step
from reasonwire.workers.io.outbox import Outbox
from reasonwire.workers.io.store import ArtefactStore, RunsMoved, StoreLost
from reasonwire.workers.ops import handoff
from reasonwire.workers.ops.gc_pause import collection_paused
from reasonwire.workers.ops.health import HealthMetrics, RepeatGate, classify, held_back_note
from reasonwire.workers.ops.intervals import expiry_interval
from reasonwire.workers.ops.retry import jitter
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.ops.telemetry.normalizer import NormalizerTelemetry
from reasonwire.workers.services.startup import committed_witness
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
        self.normalizer = Normalizer(
            PolicyBook.load(settings.policy_file), translators=translator_for, agui_version=settings.agui_version
        )
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
        with collection_paused():  # stepped and handed over without a collection in between
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
        """Feed the machine's stream clock: per partition, whether every record
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
            # refuses writes — 1,632 copies in one OOM
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

    # -- health: backoff, state-change logging ----------------------------------------------

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
        died and whose partitions it now takes over — would pass. One admin request
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
