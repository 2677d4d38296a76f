"""Redis adapters: the artefact store and the open-run journal (key layout: ``contracts.store``).

All writes of one poll go in one ``MULTI``/``EXEC`` pipeline: the artefacts,
the thread index and the journal entries land together or not at all, before
the outputs are published — one round trip per batch of records. Runs that
ended are closed (journal dropped, ended marker set) in a second transaction
after publishing, and the offsets are committed after that.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from redis.asyncio import Redis

from contracts.artefacts import ArtefactRecord
from contracts.store import artefact_key, artefact_slot, ended_key, journal_key, thread_index_key, thread_runs_key
from workers.core.normalizer import JournalEntry, RunKey, Step
from workers.core.wire import record_json

_SSE_SEPARATOR = b"\x00"


class ArtefactStore:
    """Artefacts by tenant + thread + entityId, a per-thread index, and run journals."""

    def __init__(self, redis: Redis, *, artefact_ttl_s: int, journal_ttl_s: int) -> None:
        self.redis = redis
        self.artefact_ttl_s = artefact_ttl_s
        self.journal_ttl_s = journal_ttl_s

    async def apply(self, steps: Iterable[Step]) -> int:
        """Write the state of a batch of steps in one transaction; returns artefacts written."""
        pipe = self.redis.pipeline(transaction=True)
        written = 0
        now_ms = int(time.time() * 1000)
        journals: dict[RunKey, dict[str, bytes]] = {}
        threads: dict[RunKey, str] = {}
        for step in steps:
            if step.run is None:
                continue
            ttl = step.artefact_ttl_s or self.artefact_ttl_s
            for record in step.artefacts:
                self._put_artefact(pipe, record.model_copy(update={"created_at_ms": now_ms}), ttl)
                written += 1
            if step.journal_append is not None:
                entry = step.journal_append
                journals.setdefault(step.run, {})[str(entry.seq)] = (entry.sse_event or "").encode() + _SSE_SEPARATOR + entry.value
                if step.thread_id is not None:
                    threads[step.run] = step.thread_id
        for run, fields in journals.items():  # one HSET + one EXPIRE per run per batch, not per record
            key = journal_key(run.tenant, run.run_id)
            pipe.hset(key, mapping=fields)  # type: ignore[arg-type]
            pipe.expire(key, self.journal_ttl_s)
            if run in threads:  # so erasing the thread finds this run's raw events (P7)
                runs = thread_runs_key(run.tenant, threads[run])
                pipe.sadd(runs, run.run_id)
                pipe.expire(runs, self.journal_ttl_s)
        if len(pipe):
            await pipe.execute()
        return written

    async def close_runs(self, steps: Iterable[Step]) -> None:
        """Drop the journals of runs that ended and mark them ended.

        Called only after the runs' outputs were published: a poll that fails before that
        is redelivered, and its runs are rebuilt from the journal — a marker written
        earlier would make the retry skip the run's last events, ``RUN_FINISHED`` included.
        """
        pipe = self.redis.pipeline(transaction=True)
        for step in steps:
            if step.run is not None and step.run_ended:
                pipe.delete(journal_key(step.run.tenant, step.run.run_id))
                # where the run ended (partition:offset): a later record is dead-lettered, a redelivered one is not
                marker = f"{step.ended_at[0]}:{step.ended_at[1]}".encode() if step.ended_at else b"1"
                pipe.set(ended_key(step.run.tenant, step.run.run_id), marker, ex=self.journal_ttl_s)
        if len(pipe):
            await pipe.execute()

    async def load_journal(self, run: RunKey) -> tuple[list[JournalEntry], bytes | bool]:
        """The raw events an open run has consumed so far, and the run's ended marker (``False``: not ended)."""
        [loaded] = await self.load_journals([run])
        return loaded

    async def load_journals(self, runs: Sequence[RunKey]) -> list[tuple[list[JournalEntry], bytes | bool]]:
        """:meth:`load_journal` for several runs in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for run in runs:
            pipe.hgetall(journal_key(run.tenant, run.run_id))
            pipe.get(ended_key(run.tenant, run.run_id))
        replies = await pipe.execute()
        return [(_journal_entries(replies[2 * i]), replies[2 * i + 1] or False) for i in range(len(runs))]

    async def thread_artefacts(self, tenant: str, thread_id: str) -> list[ArtefactRecord]:
        """A thread's artefacts in arrival order (what a replay reads)."""
        slots = await self.redis.lrange(thread_index_key(tenant, thread_id), 0, -1)
        if not slots:
            return []
        keys = [artefact_key(tenant, thread_id, s.decode()) for s in dict.fromkeys(slots)]
        blobs = await self.redis.mget(keys)
        return [ArtefactRecord.model_validate_json(b) for b in blobs if b is not None]

    async def erase_thread(self, tenant: str, thread_id: str) -> dict[str, list[str]]:
        """Remove every artefact of a thread, its index, and the journals of its runs; says what went."""
        index, runs_key = thread_index_key(tenant, thread_id), thread_runs_key(tenant, thread_id)
        slots = list(dict.fromkeys(s.decode() for s in await self.redis.lrange(index, 0, -1)))
        runs = sorted(r.decode() for r in await self.redis.smembers(runs_key))
        pipe = self.redis.pipeline(transaction=True)
        for slot in slots:
            pipe.delete(artefact_key(tenant, thread_id, slot))
        for run_id in runs:
            pipe.delete(journal_key(tenant, run_id))
        pipe.delete(index, runs_key)
        results = await pipe.execute()
        removed_slots = [s for s, n in zip(slots, results, strict=False) if n]
        removed_journals = [r for r, n in zip(runs, results[len(slots) :], strict=False) if n]
        return {"artefacts": removed_slots, "journals": removed_journals}

    def _put_artefact(self, pipe: object, record: ArtefactRecord, ttl_s: int) -> None:
        tenant = record.tenant or "default"
        slot = artefact_slot(record.entity_id, record.native.position)
        key = artefact_key(tenant, record.thread_id, slot)
        index = thread_index_key(tenant, record.thread_id)
        pipe.set(key, record_json(record), ex=ttl_s)  # type: ignore[attr-defined]
        pipe.rpush(index, slot)  # type: ignore[attr-defined]
        pipe.expire(index, ttl_s)  # type: ignore[attr-defined]


def _journal_entries(entries: dict[bytes, bytes]) -> list[JournalEntry]:
    journal = []
    for seq, blob in entries.items():
        sse, _, value = blob.partition(_SSE_SEPARATOR)
        journal.append(JournalEntry(int(seq), value, sse.decode() or None))
    return journal
