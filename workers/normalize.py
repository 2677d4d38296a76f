"""The normalizer worker: ``reasoning.raw.v1`` → translators → Redis and downstream topics.

A thin FastStream adapter around :class:`reasonwire.workers.core.normalizer.Normalizer`; every
decision lives there. Per poll (a batch of raw records): route and translate
each record, write artefacts and journal entries in one Redis transaction,
publish the outputs and wait for the broker's acknowledgement, close the runs
that ended (journal dropped, ended marker set), then commit the poll's offsets
(``AckPolicy.MANUAL``: the worker commits explicit offsets itself). Polls are
pipelined — the next poll is stepped while the previous ones' writes are in
flight (``RW_MAX_IN_FLIGHT``) — but each poll's effects keep that order and
polls commit in order, so offsets are committed only after a record's outputs
and Redis writes are done: at least once. An infrastructure failure rewinds
every partition in flight to its first uncommitted record and retries; bad
input never raises — it is dead-lettered. Each poll is traced and counted by
:mod:`reasonwire.workers.telemetry.normalizer`, whose guards keep content out of spans,
metrics and logs (P8, docs/telemetry.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import secrets
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from faststream import AckPolicy, FastStream
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage

from reasonwire.contracts import topics
from reasonwire.contracts.policy import PolicyBook
from reasonwire.contracts.topic_plan import plan
from reasonwire.workers import handoff, topics_admin
from reasonwire.workers.core.backoff import Backoff, Degradation, Report
from reasonwire.workers.core.delivery import DEFAULT_MAX_MESSAGE_BYTES, DeadLetterCode, OutputLimits
from reasonwire.workers.core.fence import stalled, witnessed
from reasonwire.workers.core.normalizer import DeadLetter, JournalEntry, Normalizer, RawRecord, RunInput, RunKey, Step
from reasonwire.workers.health import HealthServer, HealthMetrics, RepeatGate, classify, held_back_note, install_log_throttle, wait_for_topics, wait_until_allowed
from reasonwire.workers.kafka_security import broker_security, client_kwargs, servers
from reasonwire.workers.partitions import partition_of
from reasonwire.workers.redis_connect import connect, redis_wait
from reasonwire.workers.settings import WorkerSettings
from reasonwire.workers.store import ArtefactStore, RunsMoved, StoreLost
from reasonwire.workers.telemetry import Telemetry, setup_telemetry
from reasonwire.workers.telemetry.normalizer import NormalizerTelemetry
from reasonwire.workers.topics_admin import replication_factor

log = logging.getLogger("reasonwire.normalize")


@dataclass(eq=False)
class _Flight:
    """One poll (or expiry tick) from its Steps to its commit: the I/O of several polls overlaps."""

    steps: Sequence[Step]
    trace: Any
    offsets: dict[TopicPartition, tuple[int, int]]
    """Partition → (first offset of the poll, offset to commit once the poll is acknowledged)."""
    early: list[asyncio.Future[Any]] = field(default_factory=list)
    """Sends queued while stepping: the outputs of runs that did not end in this poll."""
    sent: asyncio.Task[list[asyncio.Future[Any]]] | None = None
    done: asyncio.Task[bool] | None = None
    acknowledged: bool = False
    """Outputs acknowledged and ended markers written: only the commit is left."""
    polled: float | None = None
    """``time.perf_counter()`` when the poll reached :meth:`NormalizerWorker.handle` (None: an expiry tick)."""


class NormalizerWorker:
    """Owns the run table, the store and the producer for one worker process.

    Polls are pipelined: :meth:`handle` steps a poll (CPU, plus a Redis read for runs it does
    not hold) and returns once the poll's writes are queued, so the next poll is stepped while
    this one's Redis transaction and broker acknowledgements are in flight. Without that, every
    poll waited for four round trips (Redis write, broker acks, ended markers, commit) before the
    next was fetched, and a record waited up to two such cycles in the fetch buffer (aiokafka
    fetches a partition again only once its buffered records are taken). Per poll: the outputs
    of runs still open are sent while stepping; the Redis transaction follows the previous
    poll's; the outputs of runs that ended follow the transaction (their artefacts are stored
    before the run's end is visible); the ended markers are written once every output is
    acknowledged and the previous poll got that far; acknowledged polls are committed in order,
    several in one commit when they queue up. A failure anywhere rewinds the consumer to the
    first uncommitted record of every partition in flight and drops those partitions' runs,
    which are rebuilt from their journals.
    """

    def __init__(self, settings: WorkerSettings, broker: KafkaBroker, store: ArtefactStore, telemetry: NormalizerTelemetry) -> None:
        self.settings = settings
        self.broker = broker
        self.store = store
        self.telemetry = telemetry
        self.normalizer = Normalizer(PolicyBook.load(settings.policy_file))
        self.normalizer.token = secrets.token_hex(4)  # this process's name in the journal heads it writes (the fence)
        self.normalizer.clock.step = expiry_interval(settings)
        self.lock = asyncio.Lock()
        """Held while stepping, expiring, rewinding and handing over: the run table has one writer."""
        self.producer: AIOKafkaProducer | None = None
        self.consumer: AIOKafkaConsumer | None = None
        """The subscriber's consumer (known from the first poll): commits and rewinds go through it."""
        self.stats: dict[str, int] = {"records": 0, "events": 0, "artefacts": 0, "dead_letters": 0, "skipped": 0, "store_lost": 0}
        self.closing = False
        self._flights: deque[_Flight] = deque()
        """Polls stepped and not yet committed, oldest first."""
        self._last: _Flight | None = None
        self._slots = asyncio.Semaphore(max(1, settings.max_in_flight))
        self._failure: BaseException | None = None
        """The first failure of the pipeline, until the rewind that repairs it."""
        self._rewound: dict[TopicPartition, int] = {}
        """After a rewind: partition → offset the redelivery starts at (records fetched before it are stale)."""
        self._recovery: asyncio.Task[None] | None = None
        self._committer: asyncio.Task[None] | None = None
        self._partitions: dict[tuple[str, bytes], int] = {}
        self._topic_partitions: dict[str, list[int]] = {}
        # -- health (issue 13): backoff between retries, one log line per state change
        self.backoff = Backoff(settings.backoff_initial_s, settings.backoff_max_s)
        self.degradation = Degradation()
        self.health_metrics = HealthMetrics(telemetry.telemetry)
        self._retry_at = 0.0
        """Loop time before which no poll is stepped (the backoff after a failure)."""
        self._store_lost = False
        """The store's epoch vanished or changed: recover it and drop every run before the next poll."""
        self._healthy_since: float | None = time.monotonic()
        """Loop time since when polls and the broker have worked without a break (``None``: broken now)."""
        self.repeats = RepeatGate()
        """Per-record WARNING lines (translator warnings, dead letters): one per kind per minute."""
        self._unsent_expiries: dict[RunKey, Step] = {}
        """The Steps of an expiry tick whose flight failed, by run. Unlike a poll's runs, no record
        brings them back (their ingress vanished; the core already let them go), so the next tick
        sends these Steps again — the same events, idempotent writes. A record of the run met
        meanwhile drops its Step (the run was not ended: it is restored from its journal and
        goes on), and so does its partition's revocation (the new owner's to judge)."""
        self._probe_store = False
        """A Redis (or store) failure happened: the next poll is stepped only once a write goes through."""
        self._committed: dict[TopicPartition, int] = {}
        """The offsets this worker last committed, per partition (the expiry's membership check)."""
        self._beat = time.monotonic()
        """When the event loop last ran the heartbeat (:meth:`beat`)."""
        self._stalled = False
        """The loop stood still for ``STALL_S`` or more since the last poll (a pause, a VM freeze)."""
        self._moved: set[RunKey] = set()
        """Runs the fence refused a write for (:class:`RunsMoved`): dropped at the rewind, and
        never sent again as an unsent expiry — another worker wrote for them since."""

    async def handle(self, records: Sequence[RawRecord]) -> None:
        """Step one poll and put its writes in flight; returns before they are acknowledged."""
        polled = time.perf_counter()  # poll → hand-off to the producer (workers/handoff.py)
        async with self.lock:
            await self._after_stall()
            if self._failure is not None:
                await self._rewind()
            await self._wait_for_retry()
            records = self._fresh(records)
            if not records or self.closing:
                return  # not committed: redelivered to whoever consumes next
            if self._probe_store and not await self._store_answers(records):
                return
            offsets = _offsets(records)
            self._note_replay(offsets)
            await self._slots.acquire()
            trace = self.telemetry.batch(records).__enter__()
            read: asyncio.Future[dict[RunKey, tuple[list[JournalEntry], Any]]] | None = None
            try:
                routed = [self.normalizer.route(record) for record in records]
                if self._unsent_expiries:
                    for item in routed:
                        if isinstance(item, RunInput):
                            self._unsent_expiries.pop(item.run, None)
                unread = self._runs_to_read(routed)
                if unread:  # in flight while the runs held here are stepped and their outputs sent
                    read = asyncio.ensure_future(self._read_journals(unread))
                    await asyncio.sleep(0)  # let it send its request before the CPU work starts
                steps: list[Step | None] = [None] * len(routed)
                held, new = _split_by_run(routed, set(unread))
                early = await self._step_and_send(routed, held, steps, {}, trace)
                if early:
                    handoff.recorder.handed(polled, False)
                if read is not None:
                    journals, read = await read, None
                    if more := await self._step_and_send(routed, new, steps, journals, trace):
                        handoff.recorder.handed(polled, False)
                        early += more
                flight = _Flight(steps, trace, offsets, early, polled=polled)  # type: ignore[arg-type]  # every slot filled
                trace.stepped(flight.steps, registered=True)
            except Exception as exc:  # the journal read or a send failed: the poll is redone
                if read is not None:
                    read.cancel()
                self._slots.release()
                trace.__exit__(type(exc), exc, exc.__traceback__)
                self._failed(exc)
                await self._rewind(offsets)
                return
            self._launch(flight)

    async def expire_idle_runs(self) -> None:
        """Close runs whose ingress vanished (RUN_ERROR code ``inactivity_timeout``) — only once the
        worker has consumed without a break for a whole timeout: silence while Redis or the broker
        was away (or the backlog after it) says nothing about the ingress."""
        async with self.lock:
            await self._after_stall()
            self._observe_partitions()
            if self.closing or not self._quiet_long_enough():
                return
            if self._failure is not None:
                await self._rewind()  # else the expired runs' RUN_ERROR would chain onto the failed poll and be lost
            steps = [*self._unsent_expiries.values(), *self.normalizer.expire(timeout_s=self.settings.inactivity_timeout_s)]
            self._unsent_expiries.clear()
            if not steps:
                return  # no trace: an empty one would record a poll duration for no poll
            if not await self._member(steps):  # sent by a later tick, unless the partition is revoked meanwhile
                self._unsent_expiries.update((step.run, step) for step in steps if step.run is not None)
                return
            trace = self.telemetry.batch(()).__enter__()
            trace.stepped(steps)  # registered before anything can quote them (P8)
            await self._slots.acquire()
            self._launch(_Flight(steps, trace, {}))

    async def _store_answers(self, records: Sequence[RawRecord]) -> bool:
        """After a Redis failure, before a poll is stepped again: does a write go through? A poll
        sends its continuing runs' outputs while stepping, before its write; while Redis refuses
        writes (out of memory, away) every retry sent them again — 1,632 copies in one OOM
        (issue 24). Now a retry is stepped only once an empty write has gone through: the
        outputs repeat at most once per poll in flight when the outage began, and once per
        flap of Redis (docs/reliability.md)."""
        try:
            await self.store.probe()
        except Exception as exc:
            self._note_failure(exc)
            await self._rewind(_offsets(records))  # not stepped: fetched again after the backoff
            return False
        self._probe_store = False
        return True

    async def _member(self, steps: Sequence[Step]) -> bool:
        """Before an expiry's writes: is this worker still a member of the group for these runs'
        partitions? Asked by committing again the offsets it last committed there (Kafka refuses
        a commit from a member the group has moved on from). An expiry is a decision no record
        makes; a worker cut off from the group's coordinator without noticing must not make it
        (issue 24 item 2) — the fence refuses its write if the new owner wrote first, this closes
        the race in which it writes first."""
        partitions = {TopicPartition(topics.RAW, step.ended_at[0]) for step in steps if step.ended_at is not None}
        offsets = {tp: self._committed[tp] for tp in partitions if tp in self._committed}
        if not offsets or self.consumer is None:
            return True
        await self._settle()  # a commit in flight lands first: offsets never go back
        offsets = {tp: self._committed[tp] for tp in offsets}
        try:
            metadata = self.store.witness.metadata()
            await self.consumer.commit({tp: (offset, metadata) for tp, offset in offsets.items()})
        except Exception as exc:
            log.info("expiry held back: the group refused this worker's commit (%s)", type(exc).__name__)
            return False
        return True

    def beat(self) -> None:
        """The event loop ran (called often by a task): a long gap since the last call is a stall."""
        now = time.monotonic()
        if stalled(now - self._beat):
            self._stalled = True
        self._beat = now

    async def _after_stall(self) -> None:
        """With the lock held: after a stall, drop every run held (issue 24 item 2). A stall as
        long as Kafka's session timeout loses the partitions without the rebalance listener being
        called until the consumer notices; meanwhile it may still fetch, and a copy of a run that
        another worker went on with is stale. Restored from their journals on their next record,
        the runs continue from what the other worker wrote — or find it ended them."""
        self.beat()
        if not self._stalled:
            return
        self._stalled = False
        await self._settle()
        dropped = self.normalizer.forget_all()
        log.info("the event loop stood still for a while: %d open runs dropped, restored from their journals on their next record", dropped)

    def _observe_partitions(self) -> None:
        """Feed the core's stream clock (issue 24 item 1): per partition, whether every record
        below the high watermark of the last fetch response has been stepped, and when that
        response came. A worker that was paused, or lags, has no such fresh confirmation, so
        its runs' silence does not grow; an outage counts as not caught up."""
        consumer = self.consumer
        if consumer is None:
            return
        healthy = self._healthy_since is not None and self._failure is None
        for tp in consumer.assignment():
            if tp.topic != topics.RAW:
                continue
            high = consumer.highwater(tp)
            fetched = consumer.last_poll_timestamp(tp)
            caught_up = healthy and high is not None and self.normalizer.stepped_to(tp.partition) >= high
            self.normalizer.clock.observe(tp.partition, caught_up=caught_up, fetched_at=fetched / 1000 if fetched else None)

    async def forget(self, partitions: list[TopicPartition]) -> None:
        """Partitions were revoked: finish (commit) what is in flight, then drop their runs."""
        async with self.lock:
            await self._settle()
            revoked = [tp for tp in partitions if tp.topic == topics.RAW]
            if self._failure is not None:
                await self._rewind(skip=set(revoked))
            for tp in revoked:
                self._rewound.pop(tp, None)
                self._committed.pop(tp, None)
            gone = {tp.partition for tp in revoked}
            dropped = self.normalizer.forget_partitions(gone, revoked=True)
            self.telemetry.forget(gone)
            for partition in gone:  # its lag is the new owner's to report
                self.health_metrics.lag.pop(partition, None)
            for run, step in list(self._unsent_expiries.items()):
                if step.ended_at is None or step.ended_at[0] in gone:
                    del self._unsent_expiries[run]
        log.info("partitions revoked: %d open runs handed over", dropped)

    async def drain(self) -> None:
        """Stop taking polls and wait until every poll in flight is committed or failed (shutdown)."""
        self.closing = True
        async with self.lock:
            await self._settle()

    def _note_replay(self, offsets: dict[TopicPartition, tuple[int, int]]) -> None:
        """A partition first fetched here: up to its log end, a previous owner may have published
        outputs it did not commit; the core judges no timeout there until it is past them."""
        for tp in offsets:
            if not self.normalizer.knows(tp.partition):
                end = self.consumer.highwater(tp) if self.consumer is not None else None
                self.normalizer.replay_until(tp.partition, end if end is not None else -1)

    # -- the pipeline ------------------------------------------------------------------

    def _launch(self, flight: _Flight) -> None:
        previous = self._last
        flight.sent = asyncio.create_task(self._store_and_send(flight, previous.sent if previous else None))
        flight.done = asyncio.create_task(self._complete(flight, previous.done if previous else None))
        self._flights.append(flight)
        self._last = flight

    async def _store_and_send(self, flight: _Flight, previous: asyncio.Task[Any] | None) -> list[asyncio.Future[Any]]:
        """The poll's Redis transaction, in poll order, then the outputs of the runs that ended in it.

        A run's last outputs (``RUN_FINISHED`` / ``RUN_ERROR``, usage) wait for its artefacts to be
        stored — and for the earlier polls' transactions — so a client that sees a run end and asks
        for a replay finds them. Its earlier outputs went out while stepping (:meth:`handle`): a
        failed transaction redoes the poll, and at least once allows the repeat."""
        if previous is not None:
            await previous  # a failed predecessor fails this poll too: nothing more of it is written
        try:
            self.stats["artefacts"] += await self.store.apply(flight.steps)
        except RunsMoved as exc:  # stale copies: nothing of theirs is sent after this (issue 24)
            self._moved.update(exc.runs)
            raise
        ended = await self._send([s for s in flight.steps if s.run_ended])
        if ended and flight.polled is not None:
            handoff.recorder.handed(flight.polled, True)
        return ended

    async def _complete(self, flight: _Flight, previous: asyncio.Task[bool] | None) -> bool:
        """Acks, then (after every earlier poll) the ended markers; the commit follows in
        :meth:`_commit_acknowledged`. Never raises: a failure is reported and rewound."""
        error: BaseException | None = None
        acks: list[Any] = list(await asyncio.gather(*flight.early, return_exceptions=True))
        try:
            assert flight.sent is not None
            acks += await asyncio.gather(*await flight.sent, return_exceptions=True)
        except Exception as exc:
            acks.append(exc)
        error = next((a for a in acks if isinstance(a, BaseException)), None)
        if error is None:
            flight.trace.acknowledged()  # the end of the records' end-to-end delay (telemetry)
        earlier_ok = previous is None or await previous
        if error is None and earlier_ok:
            try:
                await self.store.close_runs(flight.steps)  # only after the outputs are acknowledged
            except Exception as exc:
                error = exc
        self._slots.release()
        ok = error is None and earlier_ok
        if ok:
            flight.acknowledged = True
            if self._committer is None or self._committer.done():
                self._committer = asyncio.create_task(self._commit_acknowledged())
        else:
            self._failed(error)
        return ok

    async def _commit_acknowledged(self) -> None:
        """Commit the oldest acknowledged polls, several in one commit when they queued up
        behind a slow one: a commit per poll would be a round trip per poll, in series."""
        while self._flights and self._flights[0].acknowledged and self._failure is None:
            ready = []
            for flight in self._flights:
                if not flight.acknowledged:
                    break
                ready.append(flight)
            offsets = {tp: end for flight in ready for tp, (_, end) in flight.offsets.items()}  # later polls win
            try:
                if offsets:
                    assert self.consumer is not None
                    # the store's write count beside each offset: the witness a restored store is judged by
                    metadata = self.store.witness.metadata()
                    await self.consumer.commit({tp: (offset, metadata) for tp, offset in offsets.items()})
                    self._committed.update(offsets)
            except Exception as exc:
                self._failed(exc)
                return
            for flight in ready:
                self._flights.remove(flight)
                self.stats["records"] += len(flight.steps) if flight.offsets else 0
                flight.trace.__exit__(None, None, None)
            self._note_success(offsets)

    def _failed(self, exc: BaseException | None) -> None:
        """The first failure is logged (type and redacted text) and schedules the rewind."""
        if self._failure is not None:
            return
        self._failure = exc or RuntimeError("poll failed")
        if isinstance(exc, RunsMoved):  # not an outage: no backoff, no degraded state
            log.info("fence: %d runs were written by another worker since (a rebalance or a partition change): copies dropped, poll redone", len(exc.runs))
        else:
            self._note_failure(self._failure)
        self._recovery = asyncio.get_running_loop().create_task(self._recover())

    async def _recover(self) -> None:
        async with self.lock:
            if self._failure is not None:
                await self._rewind()

    async def _settle(self) -> None:
        """Until every flight has completed (each waits for its predecessor, so the last one)
        and the acknowledged ones are committed."""
        if self._last is not None and self._last.done is not None:
            await self._last.done
        while self._committer is not None and not self._committer.done():
            await self._committer

    async def _rewind(self, extra: dict[TopicPartition, tuple[int, int]] | None = None, skip: set[TopicPartition] | None = None) -> None:
        """With the lock held: seek every partition in flight back to its first uncommitted record
        and drop its runs (the core advanced them in memory; they are restored from the journal)."""
        await self._settle()
        first: dict[TopicPartition, int] = {}
        for offsets in [*(f.offsets for f in self._flights), extra or {}]:
            for tp, (start, _) in offsets.items():
                first[tp] = min(start, first.get(tp, start))
        failure = self._failure or RuntimeError("rewound")
        for flight in self._flights:  # their records come again: spans end in ERROR, nothing counted
            flight.trace.__exit__(type(failure), failure, None)
            if not flight.offsets and not flight.acknowledged:  # an expiry tick's: sent again (see _unsent_expiries)
                self._unsent_expiries.update((step.run, step) for step in flight.steps if step.run is not None and step.run not in self._moved)
        if self._moved:
            self.normalizer.forget_runs(self._moved)
            for run in self._moved:
                self._unsent_expiries.pop(run, None)
            self._moved.clear()
        self._flights.clear()
        self._last = None  # the next poll starts a new chain: it must not wait on a failed one
        self._failure = None
        assigned = self.consumer.assignment() if self.consumer is not None else set()
        dropped = {tp.partition for tp in first}
        if self._store_lost and await self._recover_store():
            dropped |= {tp.partition for tp in assigned}  # every run held here: its journal may be gone
        self.normalizer.forget_partitions(dropped)
        for tp, offset in first.items():
            if tp in assigned and tp not in (skip or ()):
                self.consumer.seek(tp, offset)  # type: ignore[union-attr]
                self._rewound[tp] = offset

    def _fresh(self, records: Sequence[RawRecord]) -> Sequence[RawRecord]:
        """Drop records fetched before a rewind: a rewound partition restarts at its offset."""
        if not self._rewound:
            return records
        kept = []
        for record in records:
            tp = TopicPartition(topics.RAW, record.partition)
            start = self._rewound.get(tp)
            if start is not None:
                if record.offset != start:
                    continue
                del self._rewound[tp]
            kept.append(record)
        return kept

    # -- health: backoff, state-change logging, store loss (issue 13) ---------------------

    def _note_failure(self, exc: BaseException) -> None:
        """Count the failure, schedule the retry one backoff step away and log only on a state
        change (or the periodic summary): a retry per poll logged a traceback per poll."""
        failure = classify(exc)
        self._healthy_since = None
        delay = self.backoff.next_delay()
        loop = asyncio.get_running_loop()
        self._retry_at = loop.time() + delay
        self.health_metrics.failed(failure)
        self.health_metrics.retried(failure)
        if isinstance(exc, StoreLost):
            self._store_lost = True
            self.health_metrics.store_lost.add(1)
        if failure.component in ("redis", "store"):
            self._probe_store = True
        self._log(self.degradation.failed(failure, loop.time(), delay), exc)

    def _note_success(self, offsets: dict[TopicPartition, int]) -> None:
        """A poll went through end to end: the backoff resets; ``recovered`` is logged once."""
        self.backoff.reset()
        if self._healthy_since is None:
            self._healthy_since = time.monotonic()
        self._log(self.degradation.succeeded(asyncio.get_running_loop().time()))
        consumer = self.consumer
        for tp, committed in offsets.items():
            high = consumer.highwater(tp) if consumer is not None else None
            if high is not None:
                self.health_metrics.lag[tp.partition] = high - committed

    async def tick_health(self) -> None:
        """Called by the periodic task: is the broker reachable (a metadata request; nothing else
        notices an outage when no poll is in flight), and the summary line while degraded. Also
        hands the summed counts of the last committed polls to the metrics SDK: they wait for a
        second (``NormalizerTelemetry.metric_flush_s``), and without a later poll only this tick
        would ever flush them."""
        self.telemetry.flush_counts()
        if await self.broker_answers() != "ok":
            self._healthy_since = None
        elif self._healthy_since is None and not self.degradation.degraded:
            self._healthy_since = time.monotonic()
        self._log(self.degradation.summary(asyncio.get_running_loop().time()))

    async def broker_answers(self) -> str:
        """``"ok"``, or the type name of the failure of a metadata request (2 s at most): the
        health tick and ``/readyz`` ask the broker the same way."""
        try:
            assert self.producer is not None
            await asyncio.wait_for(self.producer.client.fetch_all_metadata(), 2.0)
        except Exception as exc:
            return type(exc).__name__
        return "ok"

    def _quiet_long_enough(self) -> bool:
        since = self._healthy_since
        return since is not None and time.monotonic() - since >= self.settings.inactivity_timeout_s

    async def _wait_for_retry(self) -> None:
        """With the lock held: sleep out the backoff (fetching stops meanwhile: < 1 % of a core)."""
        delay = self._retry_at - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _recover_store(self) -> bool:
        """After :class:`StoreLost`: adopt a new epoch (marked lost). True once done; while Redis is
        still away the epoch stays the old one, so the next store call fails again and retries."""
        try:
            epoch = await self.store.recover_from_loss()
        except Exception as exc:
            self._note_failure(exc)
            return False
        self._store_lost = False
        log.warning(
            "store lost data: new epoch %s; runs whose journal vanished are not resumed (dead-lettered store_lost)", epoch
        )
        return True

    def _refuse_lost_run(self, routed: RunInput) -> Step:
        """A record of a run whose journal vanished with the store: resuming it would renumber
        events already published, so it is dead-lettered and nothing is published for it."""
        self.stats["store_lost"] += 1
        log.debug("run %s rw-seq %d: journal lost with the store; dead-lettered", routed.envelope.run_id, routed.envelope.seq)
        return self.normalizer.reject(DeadLetter(routed.record, "the run's journal vanished with the store", DeadLetterCode.STORE_LOST))

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

    # -- stepping ----------------------------------------------------------------------

    def _runs_to_read(self, routed: Sequence[DeadLetter | RunInput]) -> list[RunKey]:
        """The runs this poll meets without holding them: their journals are read first.

        Judged on each run's first record in the poll: the later ones are ahead of the run's
        state only until the earlier ones are stepped (asking for them read — and decoded —
        the whole journal of every run with two records in a poll, for nothing)."""
        first: dict[RunKey, RunInput] = {}
        for item in routed:
            if isinstance(item, RunInput):
                first.setdefault(item.run, item)
        return [run for run, item in first.items() if self.normalizer.needs_restore(item)]

    async def _read_journals(self, runs: list[RunKey]) -> dict[RunKey, tuple[list[JournalEntry], Any]]:
        """The journals (and ended markers) of ``runs``, in one round trip."""
        return dict(zip(runs, await self.store.load_journals(runs), strict=True))

    async def _step_and_send(
        self, routed: Sequence[DeadLetter | RunInput], positions: list[int], steps: list[Step | None],
        journals: dict[RunKey, tuple[list[JournalEntry], Any]], trace: Any,
    ) -> list[asyncio.Future[Any]]:
        """Step the records at ``positions`` (into ``steps``, which stays in record order), register
        their content, then queue the outputs of their runs that did not end.

        A poll is stepped in two parts when it meets runs this worker does not hold: the held
        runs' records first, while the journal read of the others is in flight — so most records
        do not wait a Redis round trip — then the new runs' records. Runs are independent: each
        run's records keep their order, and only their order per run is a contract."""
        part = []
        for i in positions:
            step = steps[i] = await self._step(routed[i], journals)
            part.append(step)
        trace.register(part)  # before Redis or Kafka can quote it (P8)
        return await self._send([s for s in part if not s.run_ended]) if part else []

    async def _step(self, routed: DeadLetter | RunInput, journals: dict[RunKey, tuple[list[JournalEntry], Any]]) -> Step:
        """One record's Step. The core never raises (a record it cannot handle is dead-lettered,
        an exception in translation fails that record's run only); what raises here is the
        store, and that is an infrastructure failure: the poll is redone."""
        if isinstance(routed, DeadLetter):
            record = routed.record
            self._warn_repeating(
                ("dead_letter", routed.code), "dead-lettered raw record at partition %d offset %d (%s): %s",
                record.partition, record.offset, routed.code, routed.reason,
            )
            return self.normalizer.reject(routed)
        if self.normalizer.needs_restore(routed):
            # fetched for this poll, once; a run met again in the poll after it ended reads it again
            journal, ended = journals.pop(routed.run, None) or await self.store.load_journal(routed.run)
            if not self.store.journal_intact(journal, ended, routed.envelope.seq):
                return self._refuse_lost_run(routed)
            self.normalizer.restore(routed, journal, ended=ended, doubtful=self.store.loss_window())
        step = self.normalizer.accept(routed)
        for warning in step.warnings:  # content-free by construction (P8); counted by the metrics
            self._warn_repeating(
                ("warning", routed.envelope.grammar, warning.code), "run %s line %d: %s", routed.envelope.run_id, warning.line, warning.message
            )
        if step.dead_letter is not None:  # codes and exception types only: never the record's content
            record = routed.record
            line = "run %s: record at partition %d offset %d dead-lettered (%s)%s"
            args = (routed.envelope.run_id, record.partition, record.offset, step.dead_letter, f" after {step.error}" if step.error else "")
            if step.dead_letter is DeadLetterCode.RUN_ENDED:
                # a late record is counted (metrics, DLQ), not logged at WARNING: a producer that
                # keeps sending after its run ended must not flood the log
                log.debug(line, *args)
            else:
                self._warn_repeating(("dead_letter", step.dead_letter), line, *args)
        if step.skipped:
            self.stats["skipped"] += 1
            # normal operation (the ingress's end record after the provider's own end): not INFO per run
            log.debug("run %s: record skipped (%s)", routed.envelope.run_id, step.skipped)
        return step

    def _warn_repeating(self, kind: Any, line: str, *args: Any) -> None:
        """A WARNING that one record causes: logged once per ``kind`` a minute, the next one saying
        how many were held back (:class:`~reasonwire.workers.health.RepeatGate`); the metrics count all."""
        held = self.repeats.admit(kind)
        if held is not None:
            log.warning(line + "%s", *args, held_back_note(held))

    async def _send(self, steps: Sequence[Step]) -> list[asyncio.Future[Any]]:
        """Queue every output with the producer, in order; the futures resolve on the broker's acks.

        Outputs are appended to one record batch per topic partition (``send_batch``), not sent
        one by one: ``send()`` per record built a future and took the accumulator's path for each
        of ~2 outputs per raw record, and hashed the key again every time. Order within a
        partition — all a run's outputs, since the key is the run id — is the order of
        ``steps``."""
        producer = self.producer
        assert producer is not None
        batches: dict[tuple[str, int], list[Any]] = {}
        stats, chosen = self.stats, self._partitions
        for step in steps:
            for out in step.outbound:
                partition = chosen.get((out.topic, out.key)) if out.key is not None else None
                if partition is None:  # a run's first output on this topic, or no key
                    partition = await self._partition(out.topic, out.key)
                slot = batches.get((out.topic, partition))
                if slot is None:
                    slot = batches[(out.topic, partition)] = [producer.create_batch()]
                if slot[-1].append(key=out.key, value=out.value, timestamp=None, headers=out.headers) is None:
                    slot.append(producer.create_batch())  # full: the next one (a first record always fits)
                    slot[-1].append(key=out.key, value=out.value, timestamp=None, headers=out.headers)
                stats["dead_letters" if out.topic == topics.DLQ else "events"] += 1
        pending = []
        for (topic, partition), slot in batches.items():
            for batch in slot:
                pending.append(await producer.send_batch(batch, topic, partition=partition))
        return pending

    async def _partition(self, topic: str, key: bytes | None) -> int:
        """The producer's own choice (murmur2 of the key, as Kafka's default partitioner), made once
        per run and topic and remembered (``_send`` looks it up): a run keeps its partition."""
        known = self._topic_partitions.get(topic)
        if known is None:
            known = self._topic_partitions[topic] = sorted(await self.producer.partitions_for(topic))  # type: ignore[union-attr]
        partition = partition_of(key, known)
        if key is not None:
            if len(self._partitions) >= _PARTITION_CACHE:
                self._partitions.clear()  # runs end; a cleared entry is recomputed identically
            self._partitions[(topic, key)] = partition
        return partition


_PARTITION_CACHE = 65_536


def _split_by_run(routed: Sequence[DeadLetter | RunInput], unread: set[RunKey]) -> tuple[list[int], list[int]]:
    """Positions of the records of runs held here (and of records of no run), and of the
    records of the ``unread`` runs, each in record order — one pass, a set lookup per record."""
    held: list[int] = []
    new: list[int] = []
    for i, item in enumerate(routed):
        (new if isinstance(item, RunInput) and item.run in unread else held).append(i)
    return held, new


def _offsets(records: Sequence[RawRecord]) -> dict[TopicPartition, tuple[int, int]]:
    """Per partition: the poll's first offset (to rewind to) and the offset to commit.

    Spans are kept per partition number and turned into ``TopicPartition`` keys once per
    partition, not once per record (a named tuple built per record, on the hot path)."""
    spans: dict[int, list[int]] = {}
    for record in records:
        offset = record.offset
        span = spans.get(record.partition)
        if span is None:
            spans[record.partition] = [offset, offset + 1]
        elif offset < span[0]:
            span[0] = offset
        elif offset >= span[1]:
            span[1] = offset + 1
    return {TopicPartition(topics.RAW, partition): (first, end) for partition, (first, end) in spans.items()}


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
    """The normalizer's topics as the plan has them (contracts/topic_plan.py: partitions
    ``RW_PARTITIONS``, replicas ``RW_REPLICATION_FACTOR``, retention, cleanup policy): created
    only with ``RW_CREATE_TOPICS=true`` — else checked, and :class:`~reasonwire.workers.topics_admin.TopicsMissing`
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
        servers(settings.kafka_bootstrap_servers), log_level=logging.DEBUG, acks="all", enable_idempotence=True, linger_ms=2, security=broker_security()
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

    async def beat_forever() -> None:
        while True:
            worker.beat()
            await asyncio.sleep(0.25)

    async def expire_forever() -> None:
        interval = expiry_interval(settings)
        while True:
            await asyncio.sleep(interval)
            try:
                await worker.expire_idle_runs()
            except Exception as exc:  # an outage must not kill the loop; the next tick retries
                worker._note_failure(exc)
            await worker.tick_health()

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
        worker.producer = AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap_servers, acks="all", enable_idempotence=True, linger_ms=2, **client_kwargs()
        )
        await worker.producer.start()

    @app.after_startup
    async def _start_expiry() -> None:
        for subscriber in broker.subscribers:  # readiness knows the consumer before the first poll
            worker.consumer = worker.consumer or getattr(subscriber, "consumer", None)
        expiry["task"] = asyncio.create_task(expire_forever())
        expiry["beat"] = asyncio.create_task(beat_forever())

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
    app, _ = create_app(settings)
    app.after_startup(tune_gc)  # the process's own: not in create_app, which tests run inside pytest
    with topics_admin.start_failures(log):
        asyncio.run(app.run())


GC_GEN0_THRESHOLD = 2_000
"""Container allocations (net of frees) between two young collections; CPython's default is 700."""


def tune_gc() -> None:
    """Keep the garbage collector out of the latency tail (issue 17, docs/benchmarks.md).

    Once started, the worker holds ~180 000 long-lived objects (modules, translators' tables,
    clients). CPython's full collection walks all of them: 0.1–0.5 s paused twice per ~30 000
    raw records with the default thresholds. After start-up everything alive is moved out of
    the collector's sight (``gc.freeze``: never scanned, never freed — it lives as long as the
    process anyway). Young collections come every 2 000 net allocations: a young collection's
    pause grows with the objects it examines — 37–130 ms at 20 000 (the former setting: the
    worst single pause of a latency round, its p99), ~5 ms at 2 000, ~1.5 ms at CPython's 700
    with more frequent middle and full ones; 2 000 spent the least time collecting of the
    three, at the same throughput (the "fourth pass" in docs/benchmarks.md)."""
    gc.collect()
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, GC_GEN0_THRESHOLD), gen1, gen2)
