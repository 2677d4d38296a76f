"""Which partition a keyed record lands in: Kafka's default partitioner (murmur2 of the key, as the
Java client), the rule the normalizer writes a run's outputs by and the gateway reads them back by —
one function, so the writer and the reader cannot drift apart."""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka.partitioner import DefaultPartitioner

_DEFAULT = DefaultPartitioner()


def partition_of(key: bytes | None, partitions: Sequence[int]) -> int:
    """The partition of ``key`` among ``partitions`` (every one available); ``None``: any one, as
    the producer picks for a record without a key."""
    every = list(partitions)
    return _DEFAULT(key, every, every)
