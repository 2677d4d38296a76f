"""The outbox hands outputs to the producer in the order given, one sender per partition, and
never makes its caller wait for a partition to drain. An in-memory stand-in
for aiokafka's producer: what is under test is the order and the batching of the hand-over."""

from __future__ import annotations

import asyncio
from typing import Any

from reasonwire.workers.core.normalizer import Outbound
from reasonwire.workers.io.outbox import Outbox


class _Builder:
    def __init__(self, room: int) -> None:
        self.values: list[bytes] = []
        self.room = room

    def append(self, *, key: bytes | None, value: bytes, timestamp: None, headers: Any) -> object | None:
        if len(self.values) >= self.room:
            return None
        self.values.append(value)
        return self


class _Producer:
    """Like aiokafka: a partition takes a new batch only once its previous one was delivered."""

    def __init__(self, room: int = 100) -> None:
        self.room = room
        self.handed: list[tuple[str, int, list[bytes]]] = []
        self.in_flight: dict[tuple[str, int], asyncio.Future[None]] = {}

    def create_batch(self) -> _Builder:
        return _Builder(self.room)

    async def send_batch(self, batch: _Builder, topic: str, *, partition: int) -> asyncio.Future[None]:
        while (previous := self.in_flight.get((topic, partition))) is not None and not previous.done():
            await asyncio.shield(previous)  # aiokafka's add_batch waits for the drain
        self.handed.append((topic, partition, list(batch.values)))
        delivered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.in_flight[(topic, partition)] = delivered
        return delivered

    def deliver_all(self) -> None:
        for future in self.in_flight.values():
            if not future.done():
                future.set_result(None)


def _out(key: bytes, value: bytes, topic: str = "t") -> Outbound:
    return Outbound(topic, key, value, [])


async def test_outputs_are_handed_over_in_order_and_coalesce_while_a_batch_is_in_flight() -> None:
    producer = _Producer()
    box = Outbox(producer, {"t": [0]})
    first = box.add([_out(b"r", b"1"), _out(b"r", b"2")])  # returns at once: nothing awaited
    await asyncio.sleep(0)
    assert producer.handed == [("t", 0, [b"1", b"2"])]
    second = box.add([_out(b"r", b"3")])
    third = box.add([_out(b"r", b"4")])
    assert second == third, "added while a batch is in flight: collected into the next batch"
    await asyncio.sleep(0)
    assert len(producer.handed) == 1, "the next batch waits for the partition to drain, the caller does not"
    producer.deliver_all()
    await asyncio.gather(*first)
    for _ in range(5):
        await asyncio.sleep(0)
    assert producer.handed[1] == ("t", 0, [b"3", b"4"])
    producer.deliver_all()
    await asyncio.gather(*second)


async def test_a_full_batch_starts_the_next_one_in_order() -> None:
    producer = _Producer(room=2)
    box = Outbox(producer, {"t": [0]})
    delivered = box.add([_out(b"r", bytes([48 + i])) for i in range(5)])
    for _ in range(10):
        await asyncio.sleep(0)
        producer.deliver_all()
    await asyncio.gather(*delivered)
    assert [values for _, _, values in producer.handed] == [[b"0", b"1"], [b"2", b"3"], [b"4"]]


async def test_a_refused_hand_over_fails_only_its_batch_and_the_sender_goes_on() -> None:
    producer = _Producer()
    calls = {"n": 0}
    real = producer.send_batch

    async def refuse_first(batch: _Builder, topic: str, *, partition: int) -> asyncio.Future[None]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("producer closed")
        return await real(batch, topic, partition=partition)

    producer.send_batch = refuse_first  # type: ignore[method-assign]
    box = Outbox(producer, {"t": [0, 1, 2]})
    [failed] = box.add([_out(b"r", b"1")])
    await asyncio.sleep(0)
    assert isinstance(failed.exception(), RuntimeError)
    [ok] = box.add([_out(b"r", b"2")])
    await asyncio.sleep(0)
    producer.deliver_all()
    await ok


async def test_runs_interleaved_in_one_add_keep_each_partitions_order_and_a_run_its_partition() -> None:
    """``add`` keeps the previous output's partition and batch while the run
    and topic stay the same; runs alternating, a second topic, a batch filling in the middle of
    a run and a keyless output must still land exactly where, and in the order, the one-by-one
    rule puts them."""
    from reasonwire.workers.io.partitions import partition_of

    producer = _Producer(room=3)
    parts = {"t": [0, 1, 2, 3], "u": [0, 1]}
    box = Outbox(producer, parts)
    keys = [b"run-a", b"run-b", b"run-c"]
    outs = []
    for i in range(12):
        key = keys[(i // 2) % 3]  # two outputs of a run, then the next run
        outs.append(_out(key, b"%d" % i, topic="t" if i % 5 else "u"))
    delivered = box.add(outs)
    for _ in range(10):
        await asyncio.sleep(0)
        producer.deliver_all()
    await asyncio.gather(*delivered)
    expected: dict[tuple[str, int], list[bytes]] = {}
    for out in outs:
        expected.setdefault((out.topic, partition_of(out.key, parts[out.topic])), []).append(out.value)
    handed: dict[tuple[str, int], list[bytes]] = {}
    for topic, partition, values in producer.handed:
        assert len(values) <= 3
        handed.setdefault((topic, partition), []).extend(values)
    assert handed == expected
    assert len(set(map(id, delivered))) == len(delivered), "one future per batch touched"
