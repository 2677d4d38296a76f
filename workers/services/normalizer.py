"""The normalizer worker: ``reasoning.raw.v1`` → translators → Redis and downstream topics.

A thin FastStream adapter around two sans-I/O objects that make every decision: the core
(:class:`reasonwire.workers.core.normalizer.Normalizer`: what each record means) and the
delivery machine (:class:`reasonwire.workers.core.delivery_machine.DeliveryMachine`: what to
read, send, write, close, commit or rewind, and when — at least once, one number one event,
docs/operations.md "Delivery and recovery"). The adapter feeds the machine each poll and the
outcome of each action, and performs the actions it returns: journal reads, writes and ended
markers against :class:`~reasonwire.workers.io.store.ArtefactStore`, sends through
:class:`~reasonwire.workers.io.outbox.Outbox`, commits and seeks on the subscriber's consumer
(``AckPolicy.MANUAL``, through :mod:`~reasonwire.workers.io.raw_consumer`). What only a process
can know is fed in from here: the broker's high watermarks (the machine's stream clock) and the
event loop's stalls. The bookkeeping around the
actions lives in the modules that own it: per-flight traces, hand-off timing and counts in
:class:`~reasonwire.workers.ops.telemetry.normalizer.Flights` (whose guards keep content out of
spans, metrics and logs: P8, docs/telemetry.md), the degraded state, lag and the lines records
cause in :class:`~reasonwire.workers.ops.health.WorkerHealth`, ``/readyz`` and the rebalance
hooks in :mod:`reasonwire.workers.services.normalizer_app`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Sequence
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
from reasonwire.workers.core.backoff import Backoff
from reasonwire.workers.core.delivery_machine import DeliveryMachine
from reasonwire.workers.core.normalizer import Normalizer, RawRecord
from reasonwire.workers.io import raw_consumer
from reasonwire.workers.io.outbox import Outbox, broker_answers
from reasonwire.workers.io.store import ArtefactStore, RunsMoved, StoreLost
from reasonwire.workers.ops.gc_pause import collection_paused
from reasonwire.workers.ops.health import WorkerHealth
from reasonwire.workers.ops.intervals import expiry_interval
from reasonwire.workers.ops.retry import jitter
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.ops.telemetry.normalizer import Flights, NormalizerTelemetry
from reasonwire.workers.translators import translator_for

log = logging.getLogger("reasonwire.normalize")


_FORGOT = {
    "revoked": "partitions revoked: %d open runs handed over",
    "stall": "the event loop stood still for a while: %d open runs dropped, restored from their journals on their next record",
    "store_lost": "store lost: %d open runs dropped",
}
"""The line each reason the machine dropped open runs for is logged with."""

_performing: ContextVar[Action | None] = ContextVar("rw_performing", default=None)
"""The machine's action being performed (tests check every I/O call happens inside one)."""


class NormalizerWorker:
    """The adapter: performs what :class:`~reasonwire.workers.core.delivery_machine.DeliveryMachine`
    returns, reports every outcome back, and decides nothing about delivery itself.

    Each I/O action runs as its own task (a poll's journal read, its sends, its Redis write, the
    ended markers, the commit), so the I/O of several polls overlaps as the machine allows;
    sends are appended synchronously, in the order returned, to the :class:`Outbox`. What it
    feeds in is what only a process can know: the broker's assignment and high watermarks (the
    machine's stream clock) and the event loop's stalls; it sleeps out the machine's backoff.
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
        self.flights = Flights(telemetry)
        """Per flight its trace and hand-off time; the worker's counts (``stats``)."""
        self.stats = self.flights.stats
        self._tasks: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        self._last_error: BaseException | None = None
        """The exception of the failure being reported (logged with the machine's :class:`BackedOff`)."""
        self.health = WorkerHealth(telemetry.telemetry, log)
        """One log line per state change (the backoff itself is the machine's), lag, per-record WARNING lines."""

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
            unmet = {p for p in {r.partition for r in records} if not self.normalizer.knows(p)}  # their log ends: see DeliveryMachine.poll
            actions = self.machine.poll(records, raw_consumer.log_ends(self.consumer, unmet), now=time.monotonic())
            flight = next((a.flight for a in actions if isinstance(a, (Probe, ReadJournals, Stepped))), None)
            if flight is not None:
                self.flights.opened(flight, records, polled)
            self._take(actions)

    def tick(self) -> None:
        """The machine's clock (a few times a second, and before each poll): the stream clock's
        observations — per partition the last fetch's high watermark and when it came, so a
        paused or lagging worker, lacking a fresh confirmation, does not see its runs' silence
        grow — then ``tick(now)``: stalls, the idle probe and the expiry are its decisions."""
        for partition, high, fetched_at in raw_consumer.stream_clock(self.consumer):
            self.machine.observe(partition, high=high, fetched_at=fetched_at)
        self._take(self.machine.tick(time.monotonic()))

    async def forget(self, partitions: list[TopicPartition]) -> None:
        """Partitions were revoked: what is in flight settles (committed), then their runs go."""
        gone = {tp.partition for tp in partitions if tp.topic == topics.RAW}
        self._take(self.machine.revoke(gone))
        await self._until(lambda: not self.machine.revoking)
        self.telemetry.forget(gone)
        self.health.forget(gone)

    async def drain(self) -> None:
        """Stop taking polls and wait until every poll in flight is committed or rewound (shutdown)."""
        self._take(self.machine.close())
        await self._until(lambda: self.machine.settled)

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
                self.flights.acknowledged(action.flight)
            elif isinstance(action, Retired):
                self._retired(action)
            elif isinstance(action, Seek):
                self._rewind(action)
            elif isinstance(action, Forgot):
                self._forgot(action)
            elif isinstance(action, Adopted):
                log.info("%d open runs of this worker's partitions taken up from the store, to end them if their producer vanished", action.runs)
            elif isinstance(action, BackedOff):
                self.health.failed(self._last_error or RuntimeError("failed"), action.delay_s)
            elif isinstance(action, Recovered):
                self.health.recovered()
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
            if isinstance(action, Commit) and not action.membership:  # each partition's lag behind its high watermark
                for partition, committed in action.offsets.items():
                    self.health.committed(partition, raw_consumer.highwater(self.consumer, partition), committed)

    async def _io(self, action: Action) -> None:
        if isinstance(action, Write):
            self.stats["artefacts"] += await self.store.apply(action.steps, action.opened)
        elif isinstance(action, Close):
            await self.store.close_runs(action.steps)  # only after the outputs are acknowledged
        elif isinstance(action, Commit):  # the store's write count beside each offset: the witness a restored store is judged by
            await raw_consumer.commit(self.consumer, action.offsets, self.store.witness.metadata())
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
        self.flights.sent(action.flight, action.outbound, action.terminal)
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
        complete = self.machine.steps_of(action.flight) if action.complete else None
        self.flights.stepped(action.flight, [step for _, step in action.items], complete)
        for item, step in action.items:
            if step.warnings or step.dead_letter is not None or step.skipped:  # most records: nothing to say
                self.health.log_step(item, step, self.stats)

    def _retired(self, action: Retired) -> None:
        failure = None if action.committed else (self._last_error or RuntimeError("rewound"))  # rewound: its records come again
        try:
            self.flights.retired(action.flight, action.records, failure)
        except Exception as exc:  # a telemetry bug must not stop delivery: the rest of this answer still runs
            self.health.warn_repeating(("telemetry", type(exc).__name__), "telemetry: closing a poll's trace failed (%s)", type(exc).__name__)

    def _rewind(self, action: Seek) -> None:
        _performing.set(action)
        try:
            raw_consumer.rewind(self.consumer, action.offsets)
        finally:
            _performing.set(None)
        self._last_error = None

    def _forgot(self, action: Forgot) -> None:
        if action.why in _FORGOT:
            log.info(_FORGOT[action.why], action.runs)

    async def _until(self, condition: Any) -> None:
        """Wait until ``condition()`` holds (re-checked whenever the machine answered)."""
        while not condition():
            changed = self._changed
            await changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- health ---------------------------------------------------------------------------

    async def tick_health(self) -> None:
        """Called by the periodic task: is the broker reachable (a metadata request; nothing else
        notices an outage when no poll is in flight), and the summary line while degraded. Also
        hands the summed counts of the last committed polls to the metrics SDK: they wait for a
        second (``NormalizerTelemetry.metric_flush_s``), and without a later poll only this tick
        would ever flush them."""
        self.telemetry.flush_counts()
        self._take(self.machine.broker_answered(await broker_answers(self.producer) == "ok"))
        self.health.summary()

    async def _wait_for_retry(self) -> None:
        """Sleep out the machine's backoff (fetching stops meanwhile: < 1 % of a core)."""
        delay = self.machine.retry_at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
