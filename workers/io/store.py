"""Redis adapters: the artefact store and the open-run journal (key layout: ``reasonwire.contracts.store``).

All writes of one poll go in one atomic script call (:mod:`reasonwire.workers.io.redis_script`): the artefacts,
the thread index and the journal entries land together or not at all, before
the outputs are published — one round trip per batch of records. Runs that
ended are closed (journal dropped, ended marker set) in a second atomic write
after publishing, and the offsets are committed after that.

On a Redis Cluster (``REDIS_URL=redis-cluster://…``, :mod:`reasonwire.workers.io.redis_connect`) a
transaction may touch one hash slot only: the same writes go as one transaction per slot
(every key of a thread shares one, a run's journal has its own), in poll order within a
slot — a slot holding a fenced run's journal as one call of the fencing write script —, each
master's writes followed by this process's write counter there (the rollback witness per
shard), and a batch that ends a run waits for a replica's acknowledgement (``WAIT``)
before its terminal event is published (:mod:`reasonwire.workers.io.redis_slots`).

Store loss. A Redis that restarts without its data (no
persistence, ``SHUTDOWN NOSAVE`` without AOF, ``FLUSHALL``, a failover to an
empty replica) would make the worker rebuild open runs from nothing and publish
``rw-event-seq`` numbers already used by different events. The worker claims an
*epoch* (:data:`EPOCH_KEY`, a hash with a random ``id``) at start; once claimed,
every write and journal read checks the id in the same round trip and raises
:class:`StoreLost` when it is missing or changed — before anything read from the
emptied store is acted on. On one server the check comes first inside the script
call, so nothing is written into, or read from, an emptied store; on a cluster
the id is read after the per-slot transactions. After a loss
the epoch records ``lost_ms``; until every journal of that time has expired
(``journal_ttl_s``), :meth:`ArtefactStore.journal_intact` refuses to resume a
run whose journal is not the complete prefix of its records (docs/reliability.md).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping, Sequence

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from reasonwire.contracts.artefacts import ArtefactRecord
from reasonwire.contracts.store import (
    artefact_key, artefact_slot, ended_key, journal_key, open_run_member, open_runs_key, parse_open_run_member, shard_count_key, thread_index_key,
    thread_runs_key,
)
from reasonwire.workers.core.fence import StoreLost as StoreLost, Witness, Witnessed, epoch_refused, journal_resumable, shards_behind
from reasonwire.workers.core.normalizer import ENVELOPE_SEQ, HEAD_SEQ, JournalEntry, RunKey, Step
from reasonwire.workers.core.wire import record_json
from reasonwire.workers.io.redis_script import EPOCH_RULE, HEAD_FIELD, READ_HASHES, WRITE_OPS, ServerScript, read_call, write_call
from reasonwire.workers.io.redis_slots import Fence, Op, SlotWriter, queue, slot_of, slot_tag

_SSE_SEPARATOR = b"\x00"
_HEAD = HEAD_FIELD.encode()
_ENVELOPE = str(ENVELOPE_SEQ)

EPOCH_KEY = "rw:v1:epoch"
"""Hash: ``id`` (random, written once per store lifetime), ``created_ms``, and ``lost_ms``
once a worker found the store had lost data. Not hash-tagged: one per store (in Redis
Cluster, read with its own slot's commands — the check is then a separate round trip)."""


_CLAIM_EPOCH = EPOCH_RULE + """
local id = redis.call('HGET', KEYS[1], 'id')
if not id then
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'created_ms', ARGV[2])
  if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'lost_ms', ARGV[2]) end
elseif id == ARGV[5] and (ARGV[6] == '1' or epoch_refused(KEYS[1], ARGV[5], ARGV[4])) then
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'lost_ms', ARGV[2], 'rolled_back_ms', ARGV[2], 'w', ARGV[4])
end
return redis.call('HGETALL', KEYS[1])
"""
"""Create the epoch only if it is missing (``lost`` marks a missing one as a loss), then read it:
one atomic step, so racing workers all adopt the first one's epoch. ARGV[4] is the witness: the
highest write count known acknowledged under the epoch id ARGV[5]. A store with that id and a
lower count went back in time (restored from an older copy: it keeps its id); its epoch is
replaced by a new one marked lost, whose count starts at the witness. ARGV[6] '1': a shard of a
Redis Cluster went back (its counters, ``workers/core/fence.py``): replace the epoch ARGV[5] all the
same (only if it is still the store's: racing workers replace it once)."""


class RunsMoved(Exception):
    """The fence refused a poll: another worker wrote for these runs since this one
    last read or wrote them, or ended them. Nothing of the poll was written."""

    def __init__(self, runs: Sequence[RunKey]) -> None:
        super().__init__(f"{len(runs)} runs were written by another worker since")
        self.runs = list(runs)


class ArtefactStore:
    """Artefacts by tenant + thread + entityId, a per-thread index, and run journals."""

    def __init__(
        self, redis: Redis | RedisCluster, *, artefact_ttl_s: int, journal_ttl_s: int, wait_replicas: int = 1, wait_timeout_ms: int = 1000
    ) -> None:
        self.redis = redis
        self.artefact_ttl_s = artefact_ttl_s
        self.journal_ttl_s = journal_ttl_s
        self.witness = Witness(secrets.token_hex(4))
        """The highest write count this process knows the store reached (its own writes, the
        committed offsets' metadata): a store below it was restored from an older copy. On a
        cluster also this process's own write count per master (its token names its counters)."""
        self.slot_writer = (
            SlotWriter(redis, wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms, token=self.witness.token, count_ttl_s=2 * journal_ttl_s)
            if isinstance(redis, RedisCluster)
            else None
        )
        """On a Redis Cluster: the poll's writes as one transaction (or fence script) per hash slot,
        a count per master, then ``WAIT`` (:mod:`reasonwire.workers.io.redis_slots`); ``None`` on one
        server (one script call per poll)."""
        self._writes = ServerScript(redis, WRITE_OPS)  # type: ignore[arg-type]
        self._reads = ServerScript(redis, READ_HASHES)  # type: ignore[arg-type]
        """On one server: a poll's writes, and its journal reads, as one ``EVALSHA`` each that
        checks the epoch first (:mod:`reasonwire.workers.io.redis_script`)."""
        self.epoch: str | None = None
        """The epoch id this process works in; ``None`` (never claimed): no checks (tools, tests)."""
        self.lost_ms: int | None = None
        """When a worker last found this store had lost data (from the epoch hash)."""
        self._rolled_back: str | None = None
        """A cluster: the epoch id under which a shard was found behind this process's count
        there — the next :meth:`recover_from_loss` replaces that epoch by one marked lost."""

    async def aclose(self) -> None:
        """Close the client (and, on a cluster, the per-master connections of the slot writer)."""
        if self.slot_writer is not None:
            await self.slot_writer.aclose()
        await self.redis.aclose()

    # -- the epoch (store-loss detection) -------------------------------------------------

    async def claim_epoch(self, *, lost: bool, witnessed: dict[str, int] | None = None) -> str:
        """Adopt the store's epoch, creating it if missing (``lost``: the caller knows data
        existed before — e.g. the consumer group has committed offsets — so a missing epoch
        means the store was wiped). Safe to race: one script creates or reads it atomically.
        ``witnessed``: per epoch id, the highest write count committed with the group's offsets
        (start-up); a store behind the count of its own id was restored from an older copy, and
        gets a new epoch marked lost."""
        now_ms = str(int(time.time() * 1000))
        rolled_back, self._rolled_back = self._rolled_back, None
        if witnessed is not None:  # start-up: the commits' counts, for the id the store has now
            current = await self.redis.hget(EPOCH_KEY, "id")
            if current is not None:
                self.witness.adopt(current.decode(), witnessed.get(current.decode(), 0))
                if await self._shards_behind(current.decode(), witnessed):
                    rolled_back = current.decode()
        if rolled_back is not None and rolled_back != self.witness.epoch:
            self.witness.adopt(rolled_back, 0)
        force = "1" if rolled_back is not None else "0"
        args = (secrets.token_hex(8), now_ms, "1" if lost else "0", self.witness.count, self.witness.epoch or "", force)
        raw = await self.redis.eval(_CLAIM_EPOCH, 1, EPOCH_KEY, *args)  # type: ignore[misc]
        fields = dict(zip(raw[::2], raw[1::2], strict=True))
        self.epoch = fields[b"id"].decode()
        self.lost_ms = int(fields[b"lost_ms"]) if b"lost_ms" in fields else None
        self.witness.adopt(self.epoch, int(fields.get(b"w", b"0")))
        return self.epoch

    async def _shards_behind(self, epoch: str, witnessed: dict[str, int]) -> bool:
        """A cluster at start-up: whether a master's counter is below the count a worker committed
        for it under ``epoch`` (the commits' metadata, :class:`Witnessed`) — a shard restored from
        an older copy, or a replica promoted without the last writes."""
        shards = [s for s in witnessed.shards if s.epoch == epoch] if isinstance(witnessed, Witnessed) else []
        if self.slot_writer is None or not shards:
            return False
        keys = {(s.token, s.slot): shard_count_key(slot_tag(s.slot), s.token) for s in shards}
        pipe = self.redis.pipeline(transaction=False)
        for key in keys.values():
            pipe.get(key)
        stored = {pair: int(value or 0) for pair, value in zip(keys, await pipe.execute(), strict=True)}
        return bool(shards_behind(shards, epoch, stored, int(time.time() * 1000), self.journal_ttl_s * 1000))

    async def recover_from_loss(self) -> str:
        """After :class:`StoreLost`: adopt the store's epoch (created here if missing) and make
        sure it is marked lost — another worker may have re-created it without knowing."""
        epoch = await self.claim_epoch(lost=True)
        if self.lost_ms is None:
            now_ms = str(int(time.time() * 1000))
            await self.redis.hsetnx(EPOCH_KEY, "lost_ms", now_ms)
            self.lost_ms = int(await self.redis.hget(EPOCH_KEY, "lost_ms") or now_ms)
        return epoch

    def loss_window(self, now_ms: int | None = None) -> bool:
        """True while journals written before the last loss may still be asked for."""
        if self.lost_ms is None:
            return False
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return now_ms - self.lost_ms < self.journal_ttl_s * 1000

    def journal_intact(self, journal: Sequence[JournalEntry], ended: bool, seq: int) -> bool:
        """Whether a run can be resumed from this journal at record ``seq``. Outside a loss
        window: always (gaps are the core's business). Inside: every record before ``seq``
        (``0..seq-1``) must be in the journal — else entries vanished with the store, and resuming
        would renumber events already published. Negative fields (the core's
        bookkeeping, e.g. a run's timeout) and entries after ``seq`` are not judged."""
        return journal_resumable((e.seq for e in journal), ended=ended, upto=seq, doubtful=self.loss_window())

    def _check_epoch(self, reply: bytes | None) -> None:
        """A cluster: the epoch id read after the per-slot writes (its counts are judged per master)."""
        if epoch_refused(self.epoch, reply.decode() if reply is not None else None):
            raise StoreLost

    async def apply(self, steps: Iterable[Step], opened: Mapping[RunKey, tuple[int, bytes]] | None = None) -> int:
        """Write the state of a batch of steps in one atomic write (:meth:`_write`: one script call,
        or on a cluster one transaction per hash slot and a replica's acknowledgement when the
        batch ends a run); returns artefacts written. ``opened``: runs the batch opens here
        (partition, envelope): their envelope goes into their journal and they into the index
        of open runs of their partition (:func:`~reasonwire.contracts.store.open_runs_key`)."""
        steps = list(steps)
        pipe: list[Op] = []
        fences: dict[RunKey, tuple[str, str]] = {}
        written = 0
        now_ms = int(time.time() * 1000)
        journals: dict[RunKey, dict[str, bytes]] = {}
        threads: dict[RunKey, str] = {}
        for step in steps:
            if step.run is None:
                continue
            if step.fence is not None:  # the run's first write in the batch expects, its last one sets
                expected = fences[step.run][0] if step.run in fences else step.fence[0]
                fences[step.run] = (expected, step.fence[1])
            ttl = step.artefact_ttl_s or self.artefact_ttl_s
            for record in step.artefacts:
                self._put_artefact(pipe, record.model_copy(update={"created_at_ms": now_ms}), ttl)
                written += 1
            if step.journal_append is not None:
                entry = step.journal_append
                journals.setdefault(step.run, {})[str(entry.seq)] = (entry.sse_event or "").encode() + _SSE_SEPARATOR + entry.value
                if step.thread_id is not None:
                    threads[step.run] = step.thread_id
        indexed: dict[int, list[bytes]] = {}
        for run, (partition, envelope) in (opened or {}).items():
            if run in journals:
                journals[run][_ENVELOPE] = _SSE_SEPARATOR + envelope
                indexed.setdefault(partition, []).append(open_run_member(run.tenant, run.run_id))
        for partition, members in indexed.items():
            pipe.append(Op("sadd", (open_runs_key(partition), *members)))
            pipe.append(Op("expire", (open_runs_key(partition), self.journal_ttl_s)))
        for run, fields in journals.items():  # one HSET + one EXPIRE per run per batch, not per record
            key = journal_key(run.tenant, run.run_id)
            pipe.append(Op("hset", (key,), {"mapping": fields}))
            pipe.append(Op("expire", (key, self.journal_ttl_s)))
            if run in threads:  # so erasing the thread finds this run's raw events (P7)
                runs = thread_runs_key(run.tenant, threads[run])
                pipe.append(Op("sadd", (runs, run.run_id)))
                pipe.append(Op("expire", (runs, self.journal_ttl_s)))
        await self._write(pipe, wait=any(step.run_ended for step in steps), fences=fences)
        return written

    async def close_runs(self, steps: Iterable[Step]) -> None:
        """Drop the journals of runs that ended and mark them ended.

        Called only after the runs' outputs were published: a poll that fails before that
        is redelivered, and its runs are rebuilt from the journal — a marker written
        earlier would make the retry skip the run's last events, ``RUN_FINISHED`` included.
        """
        pipe: list[Op] = []
        for step in steps:
            if step.run is not None and step.run_ended:
                pipe.append(Op("delete", (journal_key(step.run.tenant, step.run.run_id),)))
                # where the run ended (partition:offset): a later record is dead-lettered, a redelivered one is not
                marker = step.ended_marker or (f"{step.ended_at[0]}:{step.ended_at[1]}".encode() if step.ended_at else b"1")
                pipe.append(Op("set", (ended_key(step.run.tenant, step.run.run_id), marker), {"ex": self.journal_ttl_s}))
                if step.ended_at is not None:
                    pipe.append(Op("srem", (open_runs_key(step.ended_at[0]), open_run_member(step.run.tenant, step.run.run_id))))
        await self._write(pipe, wait=False)

    async def open_runs(self, partitions: Sequence[int]) -> dict[int, list[RunKey]]:
        """The index of open runs of these raw partitions (one round trip)."""
        pipe = self.redis.pipeline(transaction=False)
        for partition in partitions:
            pipe.smembers(open_runs_key(partition))
        out: dict[int, list[RunKey]] = {}
        for partition, members in zip(partitions, await pipe.execute(), strict=True):
            runs = (parse_open_run_member(m) for m in members)
            out[partition] = [RunKey(*run) for run in runs if run is not None]
        return out

    async def _write(self, ops: list[Op], *, wait: bool, fences: dict[RunKey, tuple[str, str]] | None = None) -> None:
        """The ops atomically with the epoch check: on one server one script call that writes
        nothing into a store whose epoch is missing or another, whose write count is below the
        witness, or where a fenced run moved (:class:`RunsMoved`); on a cluster one transaction
        per hash slot (:meth:`_write_slots`). Raises :class:`StoreLost`, :class:`RunsMoved`."""
        if self.slot_writer is not None:
            await self._write_slots(ops, wait=wait, fences=fences or {})
            return
        if not ops and not fences:
            return
        runs = list(fences or ())
        guards = [(journal_key(r.tenant, r.run_id), ended_key(r.tenant, r.run_id), *fences[r]) for r in runs] if fences else []
        reply = await self._writes(*write_call(ops, EPOCH_KEY, self.epoch, witness=self.witness.count, fences=guards, journal_ttl_s=self.journal_ttl_s))
        if reply == 0:
            raise StoreLost
        if reply[0] == 2:
            raise RunsMoved([runs[i - 1] for i in reply[1:]])
        self.witness.saw(int(reply[1]))

    async def _write_slots(self, ops: list[Op], *, wait: bool, fences: dict[RunKey, tuple[str, str]]) -> None:
        """:meth:`_write` on a Redis Cluster: one transaction per hash slot, a slot holding a fenced
        run's journal written by the fence script (the run's keys share one slot), this process's
        count incremented on every master written to, the epoch read after them (its key has its
        own slot), and with ``wait`` a replica's acknowledgement. Unlike one server, a refused run
        does not stop the other slots' writes: what lands is the moved run's thread artefacts
        (values derived from the same records) and the other runs' journals, which the redo finds."""
        assert self.slot_writer is not None
        runs = list(fences)
        guards = [Fence(journal_key(r.tenant, r.run_id), ended_key(r.tenant, r.run_id), *fences[r]) for r in runs]
        counted = self.epoch is not None
        # even with no ops: with ``wait`` a run that ends here waits for the replicas of the
        # masters earlier polls wrote its artefacts to (SlotWriter.write)
        done = await self.slot_writer.write_guarded(ops, wait=wait, fences=guards, count=counted, journal_ttl_s=self.journal_ttl_s)
        if counted:
            self._check_counts({slot: count - 1 for slot, count in done.counts.items()})
            if ops or guards:
                self._check_epoch(await self.redis.hget(EPOCH_KEY, "id"))
            now_ms = int(time.time() * 1000)
            for slot, count in done.counts.items():
                self.witness.saw_shard(slot, count, now_ms)
        if done.moved:
            raise RunsMoved([runs[i] for i in done.moved])

    def _check_counts(self, counts: dict[int, int]) -> None:
        """A cluster: each master's count of this process's writes (before this write, or as read)
        must not be below what this process saw acknowledged there — else that shard went back
        (a lagging replica promoted, a restored copy) and the epoch is replaced, marked lost."""
        now_ms = int(time.time() * 1000)
        if any(self.witness.shard_behind(slot, count, now_ms, self.journal_ttl_s * 1000) for slot, count in counts.items()):
            self._rolled_back = self.witness.epoch
            raise StoreLost

    async def probe(self) -> None:
        """A write that writes nothing: the write script with no ops, refused exactly when a
        poll's write would be — Redis away, out of memory (Redis refuses a script that may write
        then), a store lost or restored (:class:`StoreLost`). On a cluster, a ``PING``."""
        if self.slot_writer is not None:
            await self.redis.ping()
            return
        reply = await self._writes(*write_call([], EPOCH_KEY, self.epoch, witness=self.witness.count))
        if reply == 0:
            raise StoreLost
        self.witness.saw(int(reply[1]))

    async def _write_with_replies(self, ops: list[Op]) -> list[object]:
        """The ops in one ``MULTI``/``EXEC`` (one transaction per slot on a cluster), with each
        command's reply — for the rare writes that report what they removed (:meth:`erase_thread`)."""
        if self.slot_writer is not None:
            return await self.slot_writer.write(ops, wait=False)
        pipe = self.redis.pipeline(transaction=True)
        queue(pipe, ops)
        return list(await pipe.execute())

    async def load_journal(self, run: RunKey) -> tuple[list[JournalEntry], bytes | bool]:
        """The raw events an open run has consumed so far, and the run's ended marker (``False``: not ended)."""
        [loaded] = await self.load_journals([run])
        return loaded

    async def load_journals(self, runs: Sequence[RunKey]) -> list[tuple[list[JournalEntry], bytes | bool]]:
        """:meth:`load_journal` for several runs in one round trip, with the epoch check (a
        journal read from a wiped store is refused): one script call on one server, one
        pipeline on a cluster."""
        pairs = [(journal_key(run.tenant, run.run_id), ended_key(run.tenant, run.run_id)) for run in runs]
        if self.slot_writer is None:
            reply = await self._reads(*read_call(pairs, EPOCH_KEY, self.epoch, witness=self.witness.count))
            if reply == 0:
                raise StoreLost
            return [(_journal_entries(zip(fields[::2], fields[1::2], strict=True)), ended or False) for fields, ended in zip(reply[::2], reply[1::2], strict=True)]
        pipe = self.redis.pipeline(transaction=False)
        for journal, ended in pairs:
            pipe.hgetall(journal)
            pipe.get(ended)
        counters = self._count_keys([journal for journal, _ in pairs]) if self.epoch is not None else {}
        for key in counters.values():
            pipe.get(key)
        if self.epoch is not None:
            pipe.hget(EPOCH_KEY, "id")
        replies = await pipe.execute()
        if self.epoch is not None:
            self._check_epoch(replies[-1])
            read = replies[2 * len(pairs) : 2 * len(pairs) + len(counters)]
            self._check_counts({slot: int(value or 0) for slot, value in zip(counters, read, strict=True)})
        return [(_journal_entries(replies[2 * i].items()), replies[2 * i + 1] or False) for i in range(len(runs))]

    def _count_keys(self, keys: Sequence[str]) -> dict[int, str]:
        """A cluster: this process's counter key on each master serving ``keys`` where it has
        counted writes (anchor slot → key): a journal read from a shard that went back is refused."""
        assert self.slot_writer is not None
        out: dict[int, str] = {}
        if not self.witness.shards:  # nothing written yet: nothing to judge a shard by
            return out
        for slot in {slot_of(key) for key in keys}:
            anchor, key = self.slot_writer.count_key(slot)
            if anchor in self.witness.shards:
                out[anchor] = key
        return out

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
        # one server: one transaction; a cluster: the thread's slot in one, each run journal's in its own
        pipe = [Op("delete", (artefact_key(tenant, thread_id, slot),)) for slot in slots]
        pipe += [Op("delete", (journal_key(tenant, run_id),)) for run_id in runs]
        pipe.append(Op("delete", (index, runs_key)))
        results = await self._write_with_replies(pipe)
        removed_slots = [s for s, n in zip(slots, results, strict=False) if n]
        removed_journals = [r for r, n in zip(runs, results[len(slots) :], strict=False) if n]
        return {"artefacts": removed_slots, "journals": removed_journals}

    def _put_artefact(self, pipe: list[Op], record: ArtefactRecord, ttl_s: int) -> None:
        tenant = record.tenant or "default"
        slot = artefact_slot(record.entity_id, record.native.position)
        key = artefact_key(tenant, record.thread_id, slot)
        index = thread_index_key(tenant, record.thread_id)
        pipe.append(Op("set", (key, record_json(record)), {"ex": ttl_s}))
        pipe.append(Op("rpush", (index, slot)))
        pipe.append(Op("expire", (index, ttl_s)))


def _journal_entries(entries: Iterable[tuple[bytes, bytes]]) -> list[JournalEntry]:
    """A journal hash's (field, value) pairs as entries (a script's flat reply needs no dict first)."""
    journal = []
    for seq, blob in entries:
        if seq == _HEAD:  # the run's head (the fence): kept whole
            journal.append(JournalEntry(HEAD_SEQ, blob))
            continue
        sse, _, value = blob.partition(_SSE_SEPARATOR)
        journal.append(JournalEntry(int(seq), value, sse.decode() or None))
    return journal
