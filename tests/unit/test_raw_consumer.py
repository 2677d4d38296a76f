"""The adapter's questions and orders to the raw topic's consumer: a rewind touches only
partitions still assigned (a revoked one is the new owner's: one number one event holds only if
a stale worker never moves its fetch position), and an unreadable committed offset is "unknown",
never an exception out of the rebalance listener."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition

from reasonwire.contracts import topics
from reasonwire.workers.io import raw_consumer


class _Consumer:
    """aiokafka's consumer surface the module uses, over a fixed assignment."""

    def __init__(self, assigned: set[int]) -> None:
        self.assigned = {TopicPartition(topics.RAW, p) for p in assigned} | {TopicPartition("other", 0)}
        self.seeks: list[tuple[int, int]] = []
        self.commits: list[dict] = []

    def assignment(self) -> set[TopicPartition]:
        return self.assigned

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp.partition, offset))

    def highwater(self, tp: TopicPartition) -> int:
        return 100 + tp.partition

    def last_poll_timestamp(self, tp: TopicPartition) -> int:
        return 2_000 if tp.partition == 0 else 0

    async def commit(self, offsets: dict) -> None:
        self.commits.append(offsets)

    async def committed(self, tp: TopicPartition) -> int:
        if tp.partition == 1:
            raise ConnectionError("coordinator moved")
        return 7


def test_a_rewind_moves_only_partitions_still_assigned() -> None:
    consumer = _Consumer({0, 2})
    raw_consumer.rewind(consumer, {0: 5, 1: 9, 2: 3})  # type: ignore[arg-type]
    assert consumer.seeks == [(0, 5), (2, 3)]


def test_the_stream_clock_names_raw_partitions_with_their_fetch_time_in_seconds() -> None:
    observed = sorted(raw_consumer.stream_clock(_Consumer({0, 1})))  # type: ignore[arg-type]
    assert observed == [(0, 100, 2.0), (1, 101, None)]


def test_a_commit_carries_the_witness_beside_each_offset() -> None:
    consumer = _Consumer({0})
    asyncio.run(raw_consumer.commit(consumer, {0: 12}, "w:3"))  # type: ignore[arg-type]
    assert consumer.commits == [{TopicPartition(topics.RAW, 0): (12, "w:3")}]


def test_an_unreadable_committed_offset_is_unknown_and_other_topics_are_ignored() -> None:
    consumer = _Consumer({0, 1})
    offsets = asyncio.run(raw_consumer.committed_offsets(consumer, sorted(consumer.assigned)))
    assert offsets == {0: 7, 1: None}


def test_before_the_subscriber_started_nothing_is_known() -> None:
    assert list(raw_consumer.stream_clock(None)) == []
    assert raw_consumer.log_ends(None, [0, 1]) == {}
    assert raw_consumer.highwater(None, 0) is None
    raw_consumer.rewind(None, {0: 1})
