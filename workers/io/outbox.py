"""The normalizer's producer side: outputs handed to aiokafka in the order the delivery machine
returned them, a poll's batches together, and no caller ever waiting for a partition to drain.

Why not ``AIOKafkaProducer.send_batch`` straight from the worker: aiokafka's accumulator takes a
new batch for a partition only once the previous one for that partition has been sent
(``add_batch`` waits on ``wait_drain``), so a caller that awaits it is held for a produce round
trip — the worker used to step the next poll only after that (6 ms p50 / 27 ms p99 at 1,200
records/s) — and two callers waiting for the same partition are not promised to be
woken in order (a third, arriving just after the drain, may go first). Here appending is
synchronous: every output goes into the open batch of its topic partition at once, in order;
one sender task per partition hands that partition's batches to aiokafka one after the other,
and whatever arrives while a batch is in flight is collected into the next one. All of a poll's
batches are handed over in the same turn of the event loop, so aiokafka's sender puts them in
one produce request per broker (with ``linger_ms=0``: the batches are built already).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from typing import Any

from reasonwire.contracts import topics
from reasonwire.workers.core.normalizer import Outbound
from reasonwire.workers.io.partitions import partition_of

_PARTITION_CACHE = 65_536
"""Remembered (topic, run key) → partition choices; cleared when full (recomputed identically)."""


async def open_outbox(producer: Any) -> Outbox:
    """The outbox of a started producer: every output topic's partitions, read once (a run keeps its partition)."""
    partitions = {topic: sorted(await producer.partitions_for(topic)) for topic in topics.ALL if topic != topics.RAW}
    return Outbox(producer, partitions)


async def broker_answers(producer: Any) -> str:
    """``"ok"``, or the type name of the failure of a metadata request (2 s at most): the
    worker's health tick and ``/readyz`` ask the broker the same way."""
    try:
        assert producer is not None
        await asyncio.wait_for(producer.client.fetch_all_metadata(), 2.0)
    except Exception as exc:
        return type(exc).__name__
    return "ok"


class _Batch:
    """A record batch being filled for one topic partition, and the future of its delivery."""

    __slots__ = ("builder", "delivered", "sealed")

    def __init__(self, builder: Any, delivered: asyncio.Future[None]) -> None:
        self.builder = builder
        self.delivered = delivered
        self.sealed = False


class Outbox:
    """Per topic partition: a queue of batches (the last one open for appends) and a sender."""

    def __init__(self, producer: Any, partitions: dict[str, list[int]]) -> None:
        self.producer = producer
        self.partitions = partitions
        """Each output topic's partitions (read at start-up: a run's partition must not change)."""
        self._queues: dict[tuple[str, int], deque[_Batch]] = {}
        self._senders: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._chosen: dict[tuple[str, bytes], int] = {}

    def add(self, outbound: Iterable[Outbound]) -> list[asyncio.Future[None]]:
        """Append every output, in order; the futures resolve when the broker acknowledged the
        batches they went into (several adds may share a batch).

        Runs once per output event: a run's outputs come one after the other, so the topic
        partition and open batch of the previous output are kept while the run's key and topic
        stay the same (nothing else appends meanwhile: appending is synchronous, and only the
        sender, another task, seals a batch it takes)."""
        loop = asyncio.get_running_loop()
        touched: dict[int, tuple[tuple[str, int], _Batch]] = {}
        queues, chosen = self._queues, self._chosen
        last_topic: str | None = None
        last_key: bytes | None = None
        tp: tuple[str, int] = ("", -1)
        batch: _Batch | None = None
        for topic, key, value, headers in outbound:
            if batch is None or key is None or key != last_key or topic != last_topic:
                partition = chosen.get((topic, key)) if key is not None else None
                if partition is None:
                    partition = self._partition(topic, key)
                tp = (topic, partition)
                queue = queues.get(tp)
                if queue is None:
                    queue = queues[tp] = deque()
                batch = queue[-1] if queue and not queue[-1].sealed else None
                last_topic, last_key = topic, key
            if batch is None or batch.builder.append(key=key, value=value, timestamp=None, headers=headers) is None:
                if batch is not None:
                    batch.sealed = True  # full: the next one (a first record always fits)
                batch = _Batch(self.producer.create_batch(), loop.create_future())
                queues[tp].append(batch)
                batch.builder.append(key=key, value=value, timestamp=None, headers=headers)
                touched[id(batch)] = (tp, batch)
            elif id(batch) not in touched:
                touched[id(batch)] = (tp, batch)
        senders = self._senders
        for tp, _ in touched.values():
            if tp not in senders:
                senders[tp] = loop.create_task(self._send(tp))
        return [batch.delivered for _, batch in touched.values()]

    async def _send(self, tp: tuple[str, int]) -> None:
        """Hand this partition's batches to aiokafka, oldest first, until none is left."""
        queue = self._queues[tp]
        try:
            while queue:
                batch = queue[0]
                batch.sealed = True
                queue.popleft()
                try:
                    delivery = await self.producer.send_batch(batch.builder, tp[0], partition=tp[1])
                except Exception as exc:
                    _fail(batch.delivered, exc)
                    continue
                delivery.add_done_callback(lambda done, target=batch.delivered: _settle(done, target))
        finally:
            del self._senders[tp]

    def _partition(self, topic: str, key: bytes | None) -> int:
        """The producer's own choice (murmur2 of the key, as Kafka's default partitioner), made
        once per run and topic and remembered: a run keeps its partition."""
        partition = partition_of(key, self.partitions[topic])
        if key is not None:
            if len(self._chosen) >= _PARTITION_CACHE:
                self._chosen.clear()
            self._chosen[(topic, key)] = partition
        return partition


def _settle(done: asyncio.Future[Any], target: asyncio.Future[None]) -> None:
    if target.done():
        return
    if done.cancelled():
        target.set_exception(asyncio.CancelledError("the producer cancelled a delivery"))
    elif done.exception() is not None:
        target.set_exception(done.exception())  # type: ignore[arg-type]
    else:
        target.set_result(None)


def _fail(target: asyncio.Future[None], exc: BaseException) -> None:
    if not target.done():
        target.set_exception(exc)
