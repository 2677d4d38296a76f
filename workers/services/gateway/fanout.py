"""Fan-out: one shared reader per topic partition, many SSE clients per run.

How a gateway replica finds a run's events without reading every partition for
every client: the normalizer publishes a run's events keyed by run id, and the
producer picks the partition with Kafka's default partitioner (murmur2 of the key
modulo the partition count — ``reasonwire.workers.services.normalizer`` computes it the same way, once
per run). The gateway computes the same function for the requested run id, so it
reads exactly one partition of the audience topic, with ``assign`` (no consumer
group, no rebalances). Per process there is at most one :class:`PartitionReader`
per (topic, partition), started on the first request that needs it; every client
of every run on that partition is served from it — never one consumer per client.

A reader keeps each run it sees in a :class:`RunLog`: events de-duplicated and
ordered by ``rw-event-seq`` (a normalizer that rewinds after a failure republishes
the same seqs; the first copy wins), already SSE-encoded once for every client.
Clients iterate a log's list and park on one future that the reader resolves when
the log grows — the cost per client is an index, a waiter and at most one write of
``chunk_bytes`` in flight (:meth:`RunLog.follow`: a reader of a finished 50 MB run is
written 64 KiB at a time as it reads, never handed a joined copy of the run).

Runs are keyed by (tenant, run id) everywhere here: two tenants' run ids never meet,
and another tenant's run is found exactly as often as one that does not exist. A reader whose consumer fails retries with backoff and jitter, keeping its runs
and its position (:mod:`reasonwire.workers.core.backoff`), logging state changes only.

Memory: a reader starts ``lookback_s`` back in its partition (so an ended run is
served whole from the topic) and keeps at most ``max_runs`` runs, evicting ended
runs first (least recently read).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from reasonwire.contracts import topics
from reasonwire.contracts.envelope import HEADER_EVENT_SEQ, HEADER_RUN_ID, HEADER_TENANT, HEADER_THREAD_ID
from reasonwire.workers.ops.retry import jitter
from reasonwire.workers.core.backoff import Backoff, Degradation, Report
from reasonwire.workers.ops.health import classify
from reasonwire.workers.io.kafka_security import client_kwargs
from reasonwire.workers.io.partitions import partition_of

log = logging.getLogger("reasonwire.gateway")

READ_BACK_MAX_S = 86_400
"""How far before a run's first record met a reader looks for the run's beginning: a run longer
than a day is not looked for further (its readers get keep-alives only, and the log says so)."""

TERMINAL = frozenset({"RUN_FINISHED", "RUN_ERROR"})
def partition_for(run_id: str, partitions: int) -> int:
    """The partition the normalizer wrote run ``run_id``'s events to (:func:`reasonwire.workers.io.partitions.partition_of`)."""
    return partition_of(run_id.encode(), range(partitions))


def sse_frame(seq: int, blob: bytes) -> bytes:
    """AG-UI's SSE encoding (``ag_ui.encoder.EventEncoder``: ``data: <json>\\n\\n``) with the
    event's seq as the SSE id, so ``Last-Event-ID`` resumes exactly after it."""
    return b"id: %d\ndata: %s\n\n" % (seq, blob)


@dataclass
class RunLog:
    """One run's events on one audience topic, in seq order without duplicates (sans-I/O)."""

    tenant: str
    thread_id: str
    frames: list[bytes] = field(default_factory=list)
    """SSE frames; index = rw-event-seq (contiguous from 0)."""
    types: list[str] = field(default_factory=list)
    pending: dict[int, tuple[str, bytes]] = field(default_factory=dict)
    """Seqs that arrived ahead of a gap, held until it fills."""
    duplicates: int = 0
    ended: bool = False
    _grown: asyncio.Future[None] | None = None

    def add(self, seq: int, blob: bytes, *, filter_encrypted: bool = False) -> bool:
        """Take one record; returns whether the log grew (False for a duplicate or a held seq)."""
        if seq < len(self.frames) or seq in self.pending:
            self.duplicates += 1
            return False
        try:
            kind = orjson.loads(blob).get("type", "")
        except (orjson.JSONDecodeError, AttributeError):
            # not a JSON object: its seq is taken but nothing is served, and it must not stop the
            # partition's reader (a replacement would replay the lookback into the same record)
            kind, blob = "", b""
        if filter_encrypted and kind == "REASONING_ENCRYPTED_VALUE":
            blob = b""  # defence in depth: the public topic never carries one (policy), but never serve one
        self.pending[seq] = (kind, blob)
        grew = False
        while len(self.frames) in self.pending:
            kind, blob = self.pending.pop(len(self.frames))
            self.frames.append(sse_frame(len(self.frames), blob) if blob else b"")
            self.types.append(kind)
            self.ended = self.ended or kind in TERMINAL
            grew = True
        if grew and self._grown is not None and not self._grown.done():
            self._grown.set_result(None)
        return grew

    async def wait(self, timeout: float) -> bool:
        """Park until the log grows (True) or ``timeout`` passes (False); one future for all clients."""
        if self._grown is None or self._grown.done():
            self._grown = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._grown), timeout)
            return True
        except TimeoutError:
            return False

    async def follow(self, after: int, keepalive_s: float, chunk_bytes: int = 64 * 1024) -> AsyncIterator[bytes]:
        """Frames after seq ``after`` (-1: from the start), live until the terminal event; a keep-alive
        comment whenever the run is quiet for ``keepalive_s``.

        Written in pieces of at most ``chunk_bytes`` (several frames joined, or one frame cut): the
        caller awaits each write, so a slow reader holds one piece, not the run. After every write
        the log is looked at again — what arrived while a write waited is sent before the end: the
        stream ends only once every frame up to the terminal one was yielded."""
        index = after + 1
        while True:
            if index < len(self.frames):
                piece, index = self.take(index, chunk_bytes)
                for start in range(0, len(piece), chunk_bytes):
                    yield piece[start : start + chunk_bytes] if len(piece) > chunk_bytes else piece
                continue
            if self.ended:
                return
            if not await self.wait(keepalive_s):
                yield b": keep-alive\n\n"

    def take(self, index: int, chunk_bytes: int) -> tuple[bytes, int]:
        """Frames from ``index`` joined up to ``chunk_bytes`` (at least one frame); the next index."""
        end, size = index, 0
        while end < len(self.frames) and (end == index or size + len(self.frames[end]) <= chunk_bytes):
            size += len(self.frames[end])
            end += 1
        return (self.frames[index] if end == index + 1 else b"".join(self.frames[index:end])), end


class PartitionReader:
    """The one consumer of (topic, partition) in this process; fills the run logs of its partition."""

    def __init__(self, bootstrap: str, topic: str, partition: int, *, lookback_s: float, max_runs: int) -> None:
        self.tp = TopicPartition(topic, partition)
        self._public = topic == topics.EVENTS_PUBLIC
        """The end-user audience's topic: an encrypted value is never served from it."""
        self._bootstrap = bootstrap
        self._lookback_s = lookback_s
        self._max_runs = max_runs
        self.runs: OrderedDict[tuple[str, str], RunLog] = OrderedDict()
        """Keyed by (tenant, run id): another tenant's run of the same id is another run."""
        self.caught_up = asyncio.Event()
        self._next_offset: int | None = None
        """Where a restarted consumer resumes (the runs already read are kept)."""
        self.backoff = Backoff(rng=jitter())
        self.health = Degradation()
        self._new_run: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.records = 0
        self._headless: dict[tuple[str, str], tuple[int, int]] = {}
        """Runs first met past their seq 0 — begun before this reader's start point (or evicted and
        met again) — with the offset and timestamp of that first record: their earlier events are
        read back (:meth:`_backfill`), else the run is found but nothing of it can ever be served
        in order (a viewer would say "streaming…" for ever while the run has ended)."""
        self._backfilling: asyncio.Task[None] | None = None
        self.backfilled = 0
        """Runs whose beginning was read back."""

    @property
    def failed(self) -> bool:
        return self._task is not None and self._task.done()

    def start(self) -> None:
        self._task = asyncio.create_task(self._read(), name=f"reader-{self.tp.topic}-{self.tp.partition}")

    async def stop(self) -> None:
        for task in (self._task, self._backfilling):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    @property
    def degraded(self) -> bool:
        """The consumer failed and is waiting out its backoff (``/readyz`` says so)."""
        return self.health.degraded

    async def find(self, tenant: str, run_id: str, timeout: float) -> RunLog | None:
        """The tenant's run, waiting up to ``timeout`` for a run that has not started yet; None when
        nothing appears in time. Another tenant's run of that id is a different key: it is neither
        found nor a reason to answer sooner — the caller learns nothing it does not own. Raises
        :class:`TimeoutError` when the reader has not read its partition up to the end in time
        (the broker is away): that is not "no such run"."""
        await asyncio.wait_for(self.caught_up.wait(), timeout)  # once per reader: the same for every run of the partition
        deadline = time.monotonic() + timeout
        while (found := self.runs.get((tenant, run_id))) is None:
            if time.monotonic() >= deadline:
                return None
            if self._new_run is None or self._new_run.done():
                self._new_run = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._new_run), deadline - time.monotonic())
        self.runs.move_to_end((tenant, run_id))
        return found

    async def _read(self) -> None:
        """Consume the partition for ever; a failure is retried after a backoff step (jittered),
        with one log line when it starts failing and one when it recovers."""
        while True:
            try:
                await self._consume()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of the consumer is retried, never fatal to the gateway
                delay = self.backoff.next_delay()
                _log(self.health.failed(classify(exc), time.monotonic(), delay), exc, where=f"reader of {self.tp.topic}[{self.tp.partition}]")
                await asyncio.sleep(delay)

    async def _consume(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=50, **client_kwargs())
        try:
            await consumer.start()  # inside: a consumer that failed to start is stopped too (no "Unclosed")
            consumer.assign([self.tp])
            end = (await consumer.end_offsets([self.tp]))[self.tp]
            if self._next_offset is not None:
                consumer.seek(self.tp, self._next_offset)
                start = self._next_offset
            else:
                found = (await consumer.offsets_for_times({self.tp: int((time.time() - self._lookback_s) * 1000)})).get(self.tp)
                start = end if found is None else found.offset
                consumer.seek(self.tp, start)
            if start >= end:
                self.caught_up.set()
            while True:
                batch = await consumer.getmany(self.tp, timeout_ms=1000, max_records=2000)
                for record in batch.get(self.tp, ()):
                    self._take(record)
                    self._next_offset = record.offset + 1
                self.backoff.reset()
                _log(self.health.succeeded(time.monotonic()), None, where=f"reader of {self.tp.topic}[{self.tp.partition}]")
                if not self.caught_up.is_set() and await consumer.position(self.tp) >= end:
                    self.caught_up.set()
        finally:
            await consumer.stop()

    def _take(self, record: object) -> None:
        headers = {k: v for k, v in record.headers}  # type: ignore[attr-defined]
        try:
            run_id = headers[HEADER_RUN_ID].decode()
            tenant = headers[HEADER_TENANT].decode()
            seq = int(headers[HEADER_EVENT_SEQ])
            thread_id = headers.get(HEADER_THREAD_ID, headers[HEADER_RUN_ID]).decode()
        except (KeyError, ValueError):
            return  # not a normalized event record: nothing a UI could be served
        self.records += 1
        key = (tenant, run_id)
        run = self.runs.get(key)
        if run is None:
            run = self.runs[key] = RunLog(tenant, thread_id)
            self._evict()
            if self._new_run is not None and not self._new_run.done():
                self._new_run.set_result(None)
            if seq > 0:
                self._headless[key] = (record.offset, record.timestamp)  # type: ignore[attr-defined]
                if self._backfilling is None or self._backfilling.done():
                    self._backfilling = asyncio.create_task(self._backfill(), name=f"backfill-{self.tp.topic}-{self.tp.partition}")
        run.add(seq, record.value, filter_encrypted=self._public)  # type: ignore[attr-defined]

    async def _backfill(self) -> None:
        """Read back the beginnings of the headless runs: windows before their first record, each
        twice as long as the last (from ``lookback_s``), until every one has its seq 0 or the log's
        start is reached. Their records are added like any other (duplicates dropped, gaps held),
        so a client already following such a run is served as soon as its start is found. Retried
        with backoff on a failure, as the partition's own reader is."""
        backoff = Backoff()
        while self._headless:
            try:
                await self._read_back()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - never fatal: the runs stay found, later served
                delay = backoff.next_delay()
                log.warning("reader of %s[%d]: reading back the start of %d runs failed (%s); again in %.1fs", self.tp.topic, self.tp.partition, len(self._headless), type(exc).__name__, delay)
                await asyncio.sleep(delay)

    async def _read_back(self) -> None:
        """One pass for the runs headless now (runs met during it wait for the next pass)."""
        todo = dict(self._headless)
        tried = set(todo)
        consumer = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, group_id=None, enable_auto_commit=False, **client_kwargs())
        try:
            await consumer.start()
            consumer.assign([self.tp])
            first = (await consumer.beginning_offsets([self.tp]))[self.tp]
            end = max(offset for offset, _ in todo.values())
            since = max(ts for _, ts in todo.values())
            oldest = min(ts for _, ts in todo.values()) - READ_BACK_MAX_S * 1000
            window_ms = max(1000, int(self._lookback_s * 1000))
            while todo and end > first and since > oldest:
                since = max(since - window_ms, oldest)
                window_ms *= 2
                found = (await consumer.offsets_for_times({self.tp: since})).get(self.tp) if since > 0 else None
                begin = first if found is None else max(first, min(found.offset, end))
                consumer.seek(self.tp, begin)
                while await consumer.position(self.tp) < end:
                    batch = await consumer.getmany(self.tp, timeout_ms=1000, max_records=2000)
                    for record in batch.get(self.tp, ()):
                        if record.offset < end:
                            self._take_back(record, todo)
                todo = {k: v for k, v in todo.items() if k in self.runs and not self.runs[k].frames}
                end = begin
            if todo:  # their beginning has left the topic (retention), or is older than READ_BACK_MAX_S
                log.warning("reader of %s[%d]: the start of %d runs was not found: they cannot be served", self.tp.topic, self.tp.partition, len(todo))
        finally:
            await consumer.stop()
        for key in tried:  # found, or given up on
            self._headless.pop(key, None)

    def _take_back(self, record: object, todo: dict[tuple[str, str], tuple[int, int]]) -> None:
        """A record read back: only for the runs being read back (the others were read whole already)."""
        headers = {k: v for k, v in record.headers}  # type: ignore[attr-defined]
        try:
            key = (headers[HEADER_TENANT].decode(), headers[HEADER_RUN_ID].decode())
            seq = int(headers[HEADER_EVENT_SEQ])
        except (KeyError, ValueError):
            return
        run = self.runs.get(key) if key in todo else None
        if run is None:
            return
        had = bool(run.frames)
        run.add(seq, record.value, filter_encrypted=self._public)  # type: ignore[attr-defined]
        self.backfilled += not had and bool(run.frames)

    def _evict(self) -> None:
        while len(self.runs) > self._max_runs:
            victim = next((k for k, r in self.runs.items() if r.ended), next(iter(self.runs)))
            del self.runs[victim]


def _log(report: Report | None, exc: BaseException | None, *, where: str) -> None:
    """One line per state change of a reader (degraded / recovered / a periodic summary)."""
    if report is not None:
        getattr(log, report.level)("%s: %s", where, report.message, exc_info=exc if report.traceback else None)


class Fanout:
    """Per process: the partition readers, started on demand."""

    def __init__(self, bootstrap: str, *, lookback_s: float = 3600, max_runs: int = 2_000) -> None:
        self._bootstrap = bootstrap
        self._lookback_s = lookback_s
        self._max_runs = max_runs
        self.readers: dict[tuple[str, int], PartitionReader] = {}
        self._partitions: dict[str, int] = {}
        self._meta: AIOKafkaConsumer | None = None

    async def partitions(self, topic: str) -> int:
        if topic not in self._partitions:
            if self._meta is None:
                meta = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, group_id=None, **client_kwargs())
                try:
                    await meta.start()
                except BaseException:  # the broker away (or the wait cancelled): the next request tries again
                    with contextlib.suppress(Exception):
                        await meta.stop()
                    raise
                self._meta = meta
            parts = self._meta.partitions_for_topic(topic)
            if not parts:
                await self._meta._client.force_metadata_update()  # noqa: SLF001 - aiokafka has no public refresh
                parts = self._meta.partitions_for_topic(topic)
            if not parts:
                raise LookupError(f"topic {topic} does not exist")
            self._partitions[topic] = len(parts)
        return self._partitions[topic]

    async def reader(self, topic: str, run_id: str) -> PartitionReader:
        partition = partition_for(run_id, await self.partitions(topic))
        reader = self.readers.get((topic, partition))
        if reader is None or reader.failed:  # a reader whose consumer died is replaced, not waited on
            reader = self.readers[(topic, partition)] = PartitionReader(
                self._bootstrap, topic, partition, lookback_s=self._lookback_s, max_runs=self._max_runs
            )
            reader.start()
        return reader

    async def stop(self) -> None:
        for reader in self.readers.values():
            await reader.stop()
        if self._meta is not None:
            await self._meta.stop()
