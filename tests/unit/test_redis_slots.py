"""Redis Cluster helpers: URL parsing and per-slot grouping (pure parts)."""

from __future__ import annotations

from typing import Any

import pytest

from reasonwire.contracts.store import artefact_key, ended_key, journal_key, thread_index_key, thread_runs_key
from reasonwire.workers.io.redis_connect import cluster_nodes, wants_cluster
from reasonwire.workers.io.redis_slots import Op, SlotWrite, group_by_slot, slot_of, slot_tag


def test_every_key_of_a_thread_shares_a_slot_and_a_run_journal_its_own() -> None:
    thread = {slot_of(k) for k in (artefact_key("t", "th-1", "e#0"), artefact_key("t", "th-1", "e2#3"), thread_index_key("t", "th-1"), thread_runs_key("t", "th-1"))}
    assert len(thread) == 1
    assert slot_of(journal_key("t", "run-9")) == slot_of(ended_key("t", "run-9"))
    many = {slot_of(thread_index_key("t", f"th-{i}")) for i in range(200)}
    assert len(many) > 150  # threads spread over the slots, not one tag for all


def test_group_by_slot_keeps_order_within_a_slot_and_first_appearance_across() -> None:
    a1 = Op("set", (artefact_key("t", "A", "x#0"), b"1"))
    b1 = Op("rpush", (thread_index_key("t", "B"), "y#0"))
    a2 = Op("rpush", (thread_index_key("t", "A"), "x#0"))
    j = Op("hset", (journal_key("t", "run"),), {"mapping": {"0": b"e"}})
    groups = group_by_slot([a1, b1, a2, j])
    assert list(groups.values())[0] == [a1, a2]
    assert [op for ops in groups.values() for op in ops if op in (b1, j)] == [b1, j]
    assert all(len({slot_of(op.key) for op in ops}) == 1 for ops in groups.values())


def test_a_delete_spanning_two_slots_is_refused() -> None:
    with pytest.raises(ValueError, match="2 hash slots"):
        group_by_slot([Op("delete", (thread_index_key("t", "A"), thread_index_key("t", "B")))])
    assert len(group_by_slot([Op("delete", (thread_index_key("t", "A"), thread_runs_key("t", "A")))])) == 1


def test_cluster_urls() -> None:
    assert wants_cluster("redis-cluster://h:1/0", {})
    assert wants_cluster("redis://h:1/0", {"RW_REDIS_CLUSTER": "1"})
    assert not wants_cluster("redis://h:1/0", {"RW_REDIS_CLUSTER": "0"})
    plain, nodes = cluster_nodes("rediss-cluster://u:p%40w@a:7000,b:7001/0?ssl_ca_certs=/ca.pem")
    assert plain == "rediss://u:p%40w@a:7000/0?ssl_ca_certs=/ca.pem"
    assert nodes == [("a", 7000), ("b", 7001)]


class _RecordingSlotWriter:
    """Stands in for :class:`SlotWriter` (which needs a cluster): records what the store asks."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[Any], bool]] = []

    async def write(self, ops: Any, *, wait: bool) -> list[Any]:
        self.calls.append((list(ops), wait))
        return []

    async def write_guarded(self, ops: Any, *, wait: bool, fences: Any = (), count: bool = False, journal_ttl_s: int = 0) -> SlotWrite:
        self.calls.append((list(ops), wait))
        return SlotWrite([])


def test_on_a_cluster_a_poll_that_only_ends_a_run_still_waits_for_replicas() -> None:
    """An ``abort`` or ``end`` record alone in a poll writes nothing, but the run's artefacts went
    to masters in earlier polls: its terminal event must wait for their replicas (``WAIT``), or
    a master lost right after it loses artefacts a reader was told about."""
    import asyncio

    from redis.asyncio import Redis

    from reasonwire.workers.core.normalizer import RunKey, Step
    from reasonwire.workers.io.store import ArtefactStore

    store = ArtefactStore(Redis(), artefact_ttl_s=60, journal_ttl_s=60)
    writer = _RecordingSlotWriter()
    store.slot_writer = writer  # type: ignore[assignment]
    asyncio.run(store.apply([Step(run=RunKey("acme", "run-1"), run_ended=True, ended_at=(0, 9))]))
    assert writer.calls == [([], True)]
    asyncio.run(store.apply([Step(run=RunKey("acme", "run-2"))]))  # nothing to write, nothing ends
    assert writer.calls[1:] in ([], [([], False)])


def test_a_slot_tag_hashes_to_its_slot_so_a_masters_counter_lives_on_it() -> None:
    """The per-master write counter (the rollback witness on a cluster) lives in the master's
    lowest slot: its key's tag must hash there, the same for every worker."""
    from reasonwire.contracts.store import shard_count_key

    for slot in (0, 1, 5461, 10923, 16383):
        assert slot_of(shard_count_key(slot_tag(slot), "ab12")) == slot
    assert slot_tag(5461) == slot_tag(5461)
    with pytest.raises(ValueError):
        slot_tag(16384)
