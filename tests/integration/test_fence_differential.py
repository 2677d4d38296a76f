"""The store's scripts and the core's fence rules agree, over generated histories.

The fence is written twice: in Lua, as the store's write script (``WRITE_OPS``,
workers/io/redis_script.py: what production runs), and in Python, as
:func:`~reasonwire.workers.core.fence.fence_accepts` (what the delivery simulation's store
applies, tests/unit/test_delivery_sim.py). Here both judge the same histories on a real Redis —
writes whose expected heads are current, stale, another writer's or the writer's own last one
(a reply lost), runs ended and their markers gone — and must refuse the same runs and leave the
same heads. The epoch and witness check is the same: its Lua fragment (``EPOCH_RULE``, in the
write, read and epoch-claim scripts) and :func:`~reasonwire.workers.core.fence.epoch_refused` /
:meth:`~reasonwire.workers.core.fence.Witness.rolled_back` judge the same generated stores.
Seeded: ``RW_SIM_SEED=n`` reruns one history.
"""

from __future__ import annotations

import os
import random
import uuid

import pytest
from redis.asyncio import Redis

from reasonwire.contracts.store import ended_key, journal_key
from reasonwire.workers.core.fence import Witness, epoch_refused, fence_accepts, next_head
from reasonwire.workers.core.normalizer import JournalEntry, RunKey, Step
from reasonwire.workers.io.redis_script import HEAD_FIELD, READ_HASHES, WRITE_OPS, ServerScript, read_call, write_call
from reasonwire.workers.io.store import _CLAIM_EPOCH, ArtefactStore, RunsMoved

pytestmark = pytest.mark.integration

HISTORIES = [int(os.environ["RW_SIM_SEED"])] if os.environ.get("RW_SIM_SEED") else range(int(os.environ.get("RW_FENCE_HISTORIES", "40")))


async def _head(redis: Redis, run: RunKey) -> str:
    value = await redis.hget(journal_key(run.tenant, run.run_id), HEAD_FIELD)
    return value.decode() if value is not None else ""


async def _history(redis: Redis, seed: int) -> None:
    rng = random.Random(seed)
    store = ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60)  # no epoch claimed: the fence alone is judged
    one_server = store.slot_writer is None
    tag = uuid.uuid4().hex[:8]
    runs = [RunKey("fence-diff", f"{tag}-{i}") for i in range(3)]
    heads = {run: "" for run in runs}
    seen = {run: [""] for run in runs}
    ended: set[RunKey] = set()
    for step in range(40):
        roll = rng.random()
        run = rng.choice(runs)
        if roll < 0.12:  # the run ends: its journal goes, its ended marker is set
            await store.close_runs([Step(run=run, run_ended=True, ended_at=(0, step), ended_marker=b"0:1")])
            heads[run] = ""
            ended.add(run)
            continue
        if roll < 0.18:  # the ended marker expired (TTL): a writer may open the run again
            await redis.delete(ended_key(run.tenant, run.run_id))
            ended.discard(run)
            continue
        writing = rng.sample(runs, rng.randint(1, len(runs)))
        fences: dict[RunKey, tuple[str, str]] = {}
        for r in writing:
            kind = rng.random()
            token = rng.choice(["w1", "w2", "w3"])
            if kind < 0.5:
                expected = heads[r]  # the writer is current
            elif kind < 0.75:
                expected = rng.choice(seen[r])  # a stale copy
            elif kind < 0.9:
                expected = f"{rng.randint(1, 9)}.{rng.choice(['w1', 'w2', 'w3'])}"  # a head it never had
            else:  # its previous attempt landed and only the reply was lost: it expects what it wrote before
                expected = rng.choice(seen[r])
                fences[r] = (expected, heads[r] or next_head(expected, token))
                continue
            fences[r] = (expected, next_head(expected, token))
        steps = [Step(run=r, thread_id="t", journal_append=JournalEntry(step, b"{}"), fence=fence) for r, fence in fences.items()]
        refused = sorted(r.run_id for r, (expected, new) in fences.items() if not fence_accepts(heads[r], expected, new, r in ended))
        try:
            await store.apply(steps)
            moved: list[str] = []
        except RunsMoved as exc:
            moved = sorted(r.run_id for r in exc.runs)
        assert moved == refused, f"history {seed} step {step}: the script refused {moved}, fence_accepts {refused} ({fences})"
        for r, (_, new) in fences.items():
            if not refused or (not one_server and r.run_id not in refused):  # one server: all or nothing; a cluster: per run's slot
                heads[r] = new
                seen[r].append(new)
        for r in runs:
            assert await _head(redis, r) == heads[r], f"history {seed} step {step}: {r.run_id}'s head differs from the rule's"


async def test_the_write_script_and_fence_accepts_agree_over_generated_histories(redis: Redis) -> None:
    for seed in HISTORIES:
        await _history(redis, seed)


async def _set_store(redis: Redis, key: str, current: str | None, count: int | None) -> None:
    """The epoch hash at ``key``: missing (``current`` None), or an id with a write count (``None``: none yet)."""
    await redis.delete(key)
    if current is not None:
        await redis.hset(key, "id", current)
        if count is not None:
            await redis.hset(key, "w", count)


async def _epoch_history(redis: Redis, seed: int) -> None:
    rng = random.Random(seed)
    key = f"rw:test:epoch:{uuid.uuid4().hex[:8]}"
    writes, reads = ServerScript(redis, WRITE_OPS), ServerScript(redis, READ_HASHES)
    try:
        for step in range(30):
            current = rng.choice([None, "e1", "e2"])
            stored = rng.choice([None, 0, 1, 3, 5, 6])
            count = stored or 0
            expected = rng.choice([None, "e1", "e2"])
            witness = rng.randint(0, 7)
            rule = epoch_refused(expected, current, count, witness if expected is not None else 0)
            where = f"history {seed} step {step} (store {current}:{stored}, expected {expected}, witness {witness})"
            await _set_store(redis, key, current, stored)
            reply = await writes(*write_call([], key, expected, witness=witness))
            assert (reply == 0) == rule, f"{where}: the write script answered {reply}, epoch_refused {rule}"
            await _set_store(redis, key, current, stored)
            reply = await reads(*read_call([], key, expected, witness=witness))
            assert (reply == 0) == rule, f"{where}: the read script answered {reply}, epoch_refused {rule}"
            witnessed = Witness()
            witnessed.adopt(rng.choice(["e1", "e2"]), rng.randint(0, 7))
            await _set_store(redis, key, current, stored)
            await redis.eval(_CLAIM_EPOCH, 1, key, "fresh", "1", "0", witnessed.count, witnessed.epoch or "", "0")  # type: ignore[misc]
            replaced = (await redis.hget(key, "id")) == b"fresh"
            behind = current is not None and witnessed.rolled_back(current, count)
            assert replaced == (current is None or behind), f"{where}: the claim replaced={replaced}, witness {witnessed.epoch}:{witnessed.count}"
    finally:
        await redis.delete(key)


async def test_the_epoch_check_of_the_scripts_and_the_core_rule_agree_over_generated_stores(redis: Redis) -> None:
    """A store whose epoch id is missing or another, or whose write count is below the witness, is
    refused by the write and read scripts exactly when :func:`epoch_refused` says so; the epoch
    claim replaces exactly the epochs :meth:`Witness.rolled_back` finds behind (and creates a
    missing one)."""
    for seed in HISTORIES:
        await _epoch_history(redis, seed)
