"""The raw topic as the normalizer's consumer sees it: high watermarks, fetch times, commits,
rewinds and the group's committed offsets.

The delivery machine decides; these are the few questions and orders the adapter puts to the
aiokafka consumer FastStream's subscriber owns (``AckPolicy.MANUAL``), kept here so the adapter
speaks in partitions and offsets, not ``TopicPartition``s. ``consumer`` is ``None`` until the
subscriber started one: every function then answers "nothing known" and does nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from reasonwire.contracts import topics

COMMITTED_READ_TIMEOUT_S = 5.0
"""How long the group's committed offset is waited for on assignment (an unreadable one: the
expiry then waits for this worker's own first commit there)."""


def _raw(partition: int) -> TopicPartition:
    return TopicPartition(topics.RAW, partition)


def highwater(consumer: AIOKafkaConsumer | None, partition: int) -> int | None:
    """The high watermark of the partition's last fetch response (``None``: none yet)."""
    return consumer.highwater(_raw(partition)) if consumer is not None else None


def stream_clock(consumer: AIOKafkaConsumer | None) -> Iterator[tuple[int, int | None, float | None]]:
    """Per assigned raw partition: its high watermark and when the fetch response that carried
    it came (seconds, ``None``: no fetch yet) — the machine's stream clock."""
    if consumer is None:
        return
    for tp in consumer.assignment():
        if tp.topic == topics.RAW:
            fetched = consumer.last_poll_timestamp(tp)
            yield tp.partition, consumer.highwater(tp), fetched / 1000 if fetched else None


def log_ends(consumer: AIOKafkaConsumer | None, partitions: Iterable[int]) -> dict[int, int | None]:
    """The broker's log end of each of ``partitions``, as the last fetch saw it."""
    if consumer is None:
        return {}
    return {p: consumer.highwater(_raw(p)) for p in partitions}


async def commit(consumer: AIOKafkaConsumer | None, offsets: Mapping[int, int], metadata: str) -> None:
    """Commit ``offsets`` for the group, ``metadata`` beside each (the store's witness)."""
    assert consumer is not None, "a commit before the subscriber's consumer started"
    await consumer.commit({_raw(p): (offset, metadata) for p, offset in offsets.items()})


def rewind(consumer: AIOKafkaConsumer | None, offsets: Mapping[int, int]) -> None:
    """Seek back to ``offsets``, only on partitions still assigned (a revoked one is the new owner's)."""
    if consumer is None:
        return
    assigned = consumer.assignment()
    for partition, offset in offsets.items():
        if _raw(partition) in assigned:
            consumer.seek(_raw(partition), offset)


async def committed_offsets(consumer: Any, partitions: Iterable[TopicPartition]) -> dict[int, int | None]:
    """The group's committed offset of each raw partition among ``partitions`` (``None``: none,
    or not readable now)."""
    out: dict[int, int | None] = {}
    for tp in partitions:
        if tp.topic != topics.RAW:
            continue
        try:
            out[tp.partition] = await asyncio.wait_for(consumer.committed(tp), COMMITTED_READ_TIMEOUT_S) if consumer is not None else None
        except Exception:
            out[tp.partition] = None
    return out
