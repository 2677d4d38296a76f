"""The sans-I/O parts of ownership: stream time, the fence, the witness, decisions journaled, and
the worker's stall and store-probe rules (no services: the clients never connect)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from redis.asyncio import Redis

from reasonwire.workers.core import normalizer as core
from reasonwire.workers.core.fence import (
    MAX_METADATA_SHARDS, ShardCount, SilenceClock, Witness, epoch_refused, fence_accepts, journal_complete, next_head, parse_metadata, parse_shards, shards_behind, stalled,
    witnessed,
)
from reasonwire.workers.core.normalizer import Ended, JournalEntry, Normalizer, RawRecord, RunInput, Step
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.services.normalizer import NormalizerWorker
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.io.store import ArtefactStore
from reasonwire.workers.ops.telemetry import setup_telemetry
from reasonwire.workers.ops.telemetry.normalizer import NormalizerTelemetry
from reasonwire.workers.translators import translator_for
from tests.conformance.oracle import LOCAL_FIXTURES

FIXTURE = LOCAL_FIXTURES / "openai-responses" / "c_interleaved_reasoning_tool_calls.jsonl"


def _records(run_id: str = "run-f", partition: int = 0, first_offset: int = 0) -> list[RawRecord]:
    run = RunEnvelope("openai-responses", run_id, f"thread-{run_id}", tenant="acme")
    with FIXTURE.open() as f:
        return [RawRecord(r.key, r.value, tuple(r.headers), partition, first_offset + i) for i, r in enumerate(raw_records(run, read_events(f)))]


def _accept_all(n: Normalizer, records: list[RawRecord], journal: list[JournalEntry] | None = None) -> list[Step]:
    steps = []
    for record in records:
        item = n.route(record)
        assert isinstance(item, RunInput)
        if journal is not None and n.needs_restore(item):
            n.restore(item, journal, ended=False)
        steps.append(n.accept(item, now=0.0))
    return steps


# -- item 1: stream time ----------------------------------------------------------------------


def test_stream_time_grows_only_between_two_fresh_caught_up_confirmations() -> None:
    clock = SilenceClock(step=1.0)
    for t in (10.0, 11.0, 12.0):
        clock.observe(0, caught_up=True, fetched_at=t)
    assert clock.at(0) == 2.0
    clock.observe(0, caught_up=True, fetched_at=12.0)  # no fetch answered since (the process was paused)
    assert clock.at(0) == 2.0
    clock.observe(0, caught_up=True, fetched_at=40.0)  # a jump credits one step at most
    assert clock.at(0) == 3.0
    clock.observe(0, caught_up=False, fetched_at=41.0)  # records wait: nothing, and the next confirmation starts afresh
    clock.observe(0, caught_up=True, fetched_at=42.0)
    assert clock.at(0) == 3.0
    clock.observe(0, caught_up=True, fetched_at=43.0)
    assert clock.at(0) == 4.0 and clock.seen(0) == 5.0  # a record now counts from the end of this tick
    clock.forget([0])
    assert clock.at(0) == 0.0


def test_a_lagging_or_paused_partition_never_expires_a_run() -> None:
    n = Normalizer(translators=translator_for)
    n.clock.step = 1.0
    _accept_all(n, _records()[:4])
    for t in range(100, 200):  # a hundred ticks, records always waiting (a backlog, or fetches not answered)
        n.clock.observe(0, caught_up=False, fetched_at=float(t))
    assert n.expire(timeout_s=4) == []
    for t in range(200, 206):
        n.clock.observe(0, caught_up=True, fetched_at=float(t))
    [step] = n.expire(timeout_s=4)
    assert step.run_ended and b"inactivity_timeout" in step.outbound[-2].value + step.outbound[-1].value


# -- items 2, 3: the fence ----------------------------------------------------------------------


def test_every_write_for_a_run_carries_the_head_it_expects_and_the_one_it_sets() -> None:
    n = Normalizer(translators=translator_for)
    n.token = "a"
    steps = _accept_all(n, _records())
    fenced = [s.fence for s in steps if s.fence is not None]
    assert fenced[0] == ("", "1.a") and all(prev[1] == cur[0] for prev, cur in zip(fenced, fenced[1:], strict=False))
    assert steps[-2].run_ended or steps[-1].run_ended
    assert next_head("7.b", "a") == "8.a" and next_head("", "a") == "1.a"


def test_the_fence_rule() -> None:
    assert fence_accepts("3.b", "3.b", "4.a", ended=False)
    assert fence_accepts("4.a", "3.b", "4.a", ended=False)  # our own write landed, its reply was lost
    assert not fence_accepts("5.b", "3.b", "4.a", ended=False)  # another worker wrote since
    assert not fence_accepts("3.b", "3.b", "4.a", ended=True)  # another worker ended it


def test_a_restore_reads_the_head_and_a_moved_run_is_dropped() -> None:
    records = _records()
    first = Normalizer(translators=translator_for)
    journal = [s.journal_append for s in _accept_all(first, records[:3]) if s.journal_append is not None]
    second = Normalizer(translators=translator_for)
    second.token = "b"
    [step] = _accept_all(second, records[3:4], journal=[*journal, JournalEntry(core.HEAD_SEQ, b"3.w")])
    assert step.fence == ("3.w", "4.b")
    second.forget_runs([step.run])  # type: ignore[list-item]
    assert second.open_runs == 0 and second.needs_restore(second.route(records[4]))  # type: ignore[arg-type]


def test_a_gap_decision_is_journaled_and_a_later_owner_ends_the_run_the_same_way() -> None:
    """The run's producer moved to a new partition; its owner saw rw-seq 5 before the old
    partition's rw-seq 3 and 4 were journaled, and ended it ``sequence_gap``. A worker that
    restores the run afterwards — even for rw-seq 3 — ends it with the same events, never
    translates rw-seq 3 under the number the ``RUN_ERROR`` took."""
    records = _records()
    a = Normalizer(translators=translator_for)
    journal = [s.journal_append for s in _accept_all(a, records[:3]) if s.journal_append is not None]
    b = Normalizer(translators=translator_for)
    [gap] = _accept_all(b, [records[5]._replace(partition=7, offset=50)], journal=list(journal))
    assert gap.run_ended and gap.journal_append is not None and gap.journal_append.seq == core.GAP_SEQ
    error = [o for o in gap.outbound if o.topic == "reasoning.events.v1"]
    c = Normalizer(translators=translator_for)
    [again] = _accept_all(c, [records[3]], journal=[*journal, gap.journal_append])
    assert again.run_ended and [o for o in again.outbound if o.topic == "reasoning.events.v1"] == error
    assert again.dead_letter == "run_ended"


# -- item 4: the witness ----------------------------------------------------------------------


def test_a_store_is_refused_when_its_epoch_is_missing_or_another_or_its_count_is_below_the_witness() -> None:
    """The epoch rule the store's scripts state in Lua (EPOCH_RULE): unchecked without a claimed
    epoch; a missing or other id is a loss; a count below the witness under the same id a rollback."""
    assert not epoch_refused(None, None, 0, 9)
    assert epoch_refused("e1", None) and epoch_refused("e1", "e2", 9, 0)
    assert epoch_refused("e1", "e1", 4, 5) and not epoch_refused("e1", "e1", 5, 5) and not epoch_refused("e1", "e1", 0, 0)


def test_the_witness_counts_per_epoch_and_rides_in_the_commit_metadata() -> None:
    w = Witness()
    w.adopt("e1", 5)
    w.saw(9)
    assert w.metadata() == "rw-w=e1:9" and parse_metadata(w.metadata()) == ("e1", 9)
    assert w.rolled_back("e1", 8) and not w.rolled_back("e1", 9) and not w.rolled_back("e2", 0)
    w.adopt("e2", 3)
    assert w.count == 3
    assert witnessed(["rw-w=e1:9", "rw-w=e1:4", b"rw-w=e2:2", "", None, "other"]) == {"e1": 9, "e2": 2}
    assert journal_complete([0, 1, -1, -3], 2) and not journal_complete([1], 2)


def test_on_a_cluster_the_witness_keeps_its_own_count_per_master_and_commits_it() -> None:
    """A Redis Cluster: a shard can go back alone (its replica promoted without the last writes)
    while the epoch hash, elsewhere, is intact. The witness keeps this worker's count per master
    (anchor slot), dated; the commits carry them, and a start-up finds a shard below one."""
    w = Witness("tok")
    w.adopt("e1", 0)
    w.saw_shard(0, 5, 1_000_000)
    w.saw_shard(5461, 7, 1_004_000)
    w.saw_shard(0, 4, 1_004_000)  # never lower: a late reply does not lower the witness
    meta = w.metadata()
    assert meta == "rw-w=e1:0|tok@1004000|0=5~0,5461=7~0" or meta == "rw-w=e1:0|tok@1004000|5461=7~0,0=5~0"
    assert parse_metadata(meta) == ("e1", 0)  # the one-server part reads as before
    assert sorted(parse_shards(meta), key=lambda s: s.slot) == [ShardCount("e1", "tok", 0, 5, 1_004_000), ShardCount("e1", "tok", 5461, 7, 1_004_000)]
    hour = 3_600_000
    assert w.shard_behind(5461, 6, 1_005_000, hour) and not w.shard_behind(5461, 7, 1_005_000, hour)
    assert not w.shard_behind(10923, 0, 1_005_000, hour)  # never written there: nothing to judge
    assert not w.shard_behind(5461, 0, 1_004_000 + hour, hour)  # older than the journals: its counter may have expired
    seen = witnessed([meta, "rw-w=e1:3|tok@1000000|5461=2~0", "rw-w=e1:1|other@1000000|0=9~1"])
    assert seen == {"e1": 3}
    assert sorted((s.token, s.slot, s.count, s.seen_ms) for s in seen.shards) == [("other", 0, 9, 999_000), ("tok", 0, 5, 1_004_000), ("tok", 5461, 7, 1_004_000)]
    behind = shards_behind(seen.shards, "e1", {("tok", 0): 5, ("tok", 5461): 3, ("other", 0): 9}, 1_005_000, hour)
    assert [(s.token, s.slot) for s in behind] == [("tok", 5461)]
    assert shards_behind(seen.shards, "e2", {}, 1_005_000, hour) == []  # a count only witnesses its own epoch
    w.adopt("e2", 0)  # a new epoch: the counts start again (a rolled-back shard is not judged twice)
    assert w.shards == {} and w.metadata() == "rw-w=e2:0"
    for slot in range(MAX_METADATA_SHARDS + 10):
        w.saw_shard(slot, 10**9, 10**13)
    assert len(parse_shards(w.metadata())) == MAX_METADATA_SHARDS and len(w.metadata()) < 4096  # Kafka's offset.metadata.max.bytes
    assert parse_shards("rw-w=e1:0|tok@x|1=2") == [] and parse_shards("rw-w=e1:0") == []


def test_a_run_restored_in_a_loss_window_is_refused_on_a_gap_not_renumbered() -> None:
    records = _records()
    journal = [s.journal_append for s in _accept_all(Normalizer(translators=translator_for), records[:1]) if s.journal_append is not None]
    n = Normalizer(translators=translator_for)
    item = n.route(records[0])
    assert isinstance(item, RunInput)
    n.restore(item, journal, ended=False, doubtful=True)  # a copy of rw-seq 0 after the store lost the rest
    assert n.accept(item, now=0.0).dead_letter is None  # redone as it was first done (identical outputs)
    later = n.route(records[4])
    assert isinstance(later, RunInput)
    step = n.accept(later, now=0.0)
    assert step.dead_letter == "store_lost" and not step.run_ended and n.open_runs == 0


# -- smaller points -------------------------------------------------------------------------


def test_an_identical_copy_after_the_end_is_a_duplicate_and_the_marker_says_so() -> None:
    records = _records()
    n = Normalizer(translators=translator_for)
    steps = _accept_all(n, records)
    end = next(s for s in steps if s.run_ended)
    copy = records[-3]._replace(offset=999)  # the producer's retry, after the run's end
    assert n.accept(n.route(copy), now=0.0).skipped  # type: ignore[arg-type]
    other = Normalizer(translators=translator_for)  # a worker that knows the end only from the store's marker
    item = other.route(copy)
    assert isinstance(item, RunInput)
    other.restore(item, [], ended=end.ended_marker)
    assert other.accept(item, now=0.0).skipped
    changed = copy._replace(value=(copy.value or b"") + b" ")
    assert other.accept(other.route(changed), now=0.0).dead_letter == "run_ended"  # type: ignore[arg-type]  # not a copy: bytes kept
    assert Ended.parse(b"3:17") == Ended(3, 17)


def _worker() -> NormalizerWorker:
    telemetry = NormalizerTelemetry(setup_telemetry(install_global=False, env={}), group_id="g")
    store = ArtefactStore(Redis.from_url("redis://127.0.0.1:1/0"), artefact_ttl_s=60, journal_ttl_s=60)
    return NormalizerWorker(WorkerSettings(inactivity_timeout_s=4), None, store, telemetry)  # type: ignore[arg-type]


async def test_a_stalled_worker_drops_every_run_before_it_steps_again() -> None:
    worker = _worker()
    _accept_all(worker.normalizer, _records()[:3])
    assert worker.normalizer.open_runs == 1
    worker.tick()
    worker.machine._last_tick = time.monotonic() - 10  # the loop stood still since the last tick (SIGSTOP, a VM pause)
    worker.tick()
    assert worker.normalizer.open_runs == 0 and stalled(3.0) and not stalled(0.5)


@pytest.mark.parametrize("policy", ["volatile-lru", "allkeys-lru", "volatile-ttl"])
async def test_an_evicting_store_is_refused_unless_said_dedicated(policy: str) -> None:
    from reasonwire.workers.services.startup import refuse_evicting_store

    class _Redis:
        async def config_get(self, pattern: str) -> dict[str, str]:
            return {"maxmemory-policy": policy}

    store: Any = type("S", (), {"redis": _Redis()})()
    refusal = await refuse_evicting_store(store, WorkerSettings())
    assert refusal is not None and policy in refusal and "RW_REDIS_DEDICATED" in refusal and "\n" not in refusal
    assert await refuse_evicting_store(store, WorkerSettings(redis_dedicated=True)) is None
    _Redis.config_get = lambda self, pattern: _noeviction()  # type: ignore[assignment,method-assign]
    assert await refuse_evicting_store(store, WorkerSettings()) is None


async def _noeviction() -> dict[str, str]:
    return {"maxmemory-policy": "noeviction"}
