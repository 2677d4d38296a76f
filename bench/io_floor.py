"""``python -m bench.io_floor``: the I/O-equivalent floor — the worker's I/O without its logic.

A bare aiokafka consumer and producer plus a bare Redis connection that, for the
same raw records the worker gets, publish **the same output records** and send
**the same Redis commands** the worker would — precomputed before the clock
starts, by running reasonwire's sans-I/O ``Normalizer`` over the records at
start-up (``RW_BENCH_FLOOR_TRAFFIC``: a pickle of ``(key, value, headers)``,
written by the harness). In the timed loop there is no translation, no
envelope reading, no run table, no telemetry and no framework: per poll a
table lookup per record (run key + ``rw-seq``), then the worker's I/O in the
worker's order and shape —

* a journal read (``HGETALL`` + ``GET`` per run, in the store's one read-script
  call) for each run met for the first time at a record other than its first — none in
  this traffic: the worker presumes a run met at ``rw-seq`` 0 new and lets its write's
  fence stand in for the read (``DeliveryMachine``);
* the outputs of runs that did not end, appended to one record batch per topic
  partition (``send_batch``, the partition chosen once per run with Kafka's
  default partitioner) while the Redis write runs: one write-script call
  (:mod:`reasonwire.workers.io.redis_script`, as the worker's store makes it) with the
  artefacts (``SET`` + ``RPUSH`` + ``EXPIRE`` each), one ``HSET`` + ``EXPIRE``
  per run for the journal and ``SADD`` + ``EXPIRE`` for the thread's run index;
* then the outputs of runs that ended, the broker's acks, the ended markers
  (a script call: ``DEL`` journal + ``SET`` marker) and the commit, in poll order,
  up to ``RW_MAX_IN_FLIGHT`` polls in flight (the worker's default), as the worker pipelines.

Worker ÷ floor is then the cost of reasonwire's own logic; floor ÷ bare
passthrough is the cost of the extra outputs and the Redis writes it must make.
The same records come again in every round; their Redis keys are overwritten,
which costs Redis the same as writing new ones.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

from bench.worker_main import prefix_topics
from reasonwire.workers.ops.settings import WorkerSettings


@dataclass
class Prepared:
    """One raw record's I/O, as the worker would do it (everything precomputed)."""

    run: tuple[str, str] | None
    """(journal key, ended key) of its run, for the first-read; None for a record of no run."""
    outputs: list[tuple[str, bytes | None, bytes, list[Any]]] = field(default_factory=list)
    artefacts: list[tuple[str, bytes, int, str, str]] = field(default_factory=list)
    """(artefact key, record bytes, TTL, thread index key, slot)."""
    journal: tuple[str, str, bytes, str, str] | None = None
    """(journal key, field, blob, thread runs key, run id)."""
    ended: tuple[str, str, bytes] | None = None
    """(journal key, ended key, marker) when the run ended with this record."""
    first: bool = False
    """The first record of its run in this traffic, and not the run's first record (``rw-seq`` > 0):
    the worker meets a run it does not hold mid-way and reads its journal."""


def prepare(records: list[tuple[bytes | None, bytes | None, list[Any]]], journal_ttl_s: int, artefact_ttl_s: int) -> dict[tuple[bytes | None, bytes | None], Prepared]:
    """The translation done before timing: each record's outputs and Redis commands."""
    from reasonwire.contracts.store import artefact_key, artefact_slot, ended_key, journal_key, thread_index_key, thread_runs_key
    from reasonwire.workers.core.normalizer import DeadLetter, Normalizer, RawRecord
    from reasonwire.workers.core.wire import record_json
    from reasonwire.workers.translators import translator_for

    normalizer = Normalizer(translators=translator_for)
    table: dict[tuple[bytes | None, bytes | None], Prepared] = {}
    met: set[object] = set()
    for offset, (key, value, headers) in enumerate(records):
        routed = normalizer.route(RawRecord(key, value, tuple(headers), 0, offset))
        step = normalizer.reject(routed) if isinstance(routed, DeadLetter) else normalizer.accept(routed, now=0.0)
        run = step.run
        prepared = Prepared(run=(journal_key(run.tenant, run.run_id), ended_key(run.tenant, run.run_id)) if run else None)
        prepared.outputs = [(o.topic, o.key, o.value, o.headers) for o in step.outbound]
        for a in step.artefacts:
            tenant = a.tenant or "default"
            slot = artefact_slot(a.entity_id, a.native.position)
            prepared.artefacts.append((artefact_key(tenant, a.thread_id, slot), record_json(a), step.artefact_ttl_s or artefact_ttl_s, thread_index_key(tenant, a.thread_id), slot))
        if run is not None and step.journal_append is not None:
            e = step.journal_append
            prepared.journal = (journal_key(run.tenant, run.run_id), str(e.seq), (e.sse_event or "").encode() + b"\x00" + e.value, thread_runs_key(run.tenant, step.thread_id or run.run_id), run.run_id)
        if run is not None and step.run_ended:
            marker = f"{step.ended_at[0]}:{step.ended_at[1]}".encode() if step.ended_at else b"1"
            prepared.ended = (journal_key(run.tenant, run.run_id), ended_key(run.tenant, run.run_id), marker)
        prepared.first = run is not None and run not in met and _seq(headers) != b"0"
        met.add(run)
        table[(key, _seq(headers))] = prepared
    return table


def _seq(headers: Any) -> bytes | None:
    for name, value in headers:
        if name == "rw-seq":
            return value  # type: ignore[no-any-return]
    return None


async def main() -> None:
    prefix_topics(os.environ["RW_BENCH_TOPIC_PREFIX"])
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.partitioner import DefaultPartitioner
    from redis.asyncio import Redis

    from bench.passthrough import _SayAssigned
    from reasonwire.workers.io.redis_script import READ_HASHES, WRITE_OPS, ServerScript, read_call, write_call
    from reasonwire.workers.io.redis_slots import Op
    from reasonwire.workers.io.store import EPOCH_KEY

    journal_ttl, artefact_ttl = int(os.environ.get("RW_JOURNAL_TTL_S", "900")), int(os.environ.get("RW_ARTEFACT_TTL_S", "900"))
    with open(os.environ["RW_BENCH_FLOOR_TRAFFIC"], "rb") as f:
        table = prepare(pickle.load(f), journal_ttl, artefact_ttl)
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=os.environ["RW_GROUP_ID"], enable_auto_commit=False, auto_offset_reset="earliest")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    redis = Redis.from_url(os.environ["REDIS_URL"])
    writes, reads = ServerScript(redis, WRITE_OPS), ServerScript(redis, READ_HASHES)
    epoch = (await redis.hget(EPOCH_KEY, "id") or b"").decode() or None  # checked in every call, as the worker's are
    await producer.start()
    await consumer.start()
    consumer.subscribe([os.environ["RW_BENCH_SOURCE"]], listener=_SayAssigned())
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    default = WorkerSettings.model_fields["max_in_flight"].default  # the worker's own default
    slots = asyncio.Semaphore(int(os.environ.get("RW_MAX_IN_FLIGHT", str(default))))
    partitioner = DefaultPartitioner()
    chosen: dict[tuple[str, bytes | None], int] = {}
    known: dict[str, list[int]] = {}

    async def send(items: list[Prepared]) -> list[Any]:
        batches: dict[tuple[str, int], list[Any]] = {}
        for p in items:
            for topic, key, value, headers in p.outputs:
                part = chosen.get((topic, key))
                if part is None:
                    if topic not in known:
                        known[topic] = sorted(await producer.partitions_for(topic))
                    part = chosen[(topic, key)] = partitioner(key, known[topic], known[topic])
                slot = batches.get((topic, part))
                if slot is None:
                    slot = batches[(topic, part)] = [producer.create_batch()]
                if slot[-1].append(key=key, value=value, timestamp=None, headers=headers) is None:
                    slot.append(producer.create_batch())
                    slot[-1].append(key=key, value=value, timestamp=None, headers=headers)
        return [await producer.send_batch(b, topic, partition=part) for (topic, part), slot in batches.items() for b in slot]

    async def store(items: list[Prepared]) -> None:
        ops: list[Op] = []
        journals: dict[str, dict[str, bytes]] = {}
        threads: dict[str, tuple[str, str]] = {}
        for p in items:
            for key, blob, ttl, index, slot in p.artefacts:
                ops += [Op("set", (key, blob), {"ex": ttl}), Op("rpush", (index, slot)), Op("expire", (index, ttl))]
            if p.journal is not None:
                jkey, fld, blob, runs_key, run_id = p.journal
                journals.setdefault(jkey, {})[fld] = blob
                threads[jkey] = (runs_key, run_id)
        for jkey, fields in journals.items():
            runs_key, run_id = threads[jkey]
            ops += [Op("hset", (jkey,), {"mapping": fields}), Op("expire", (jkey, journal_ttl))]
            ops += [Op("sadd", (runs_key, run_id)), Op("expire", (runs_key, journal_ttl))]
        if ops:
            await writes(*write_call(ops, EPOCH_KEY, epoch))

    async def close(items: list[Prepared]) -> None:
        ops = [op for p in items if p.ended is not None for op in (Op("delete", (p.ended[0],)), Op("set", (p.ended[1], p.ended[2]), {"ex": journal_ttl}))]
        if ops:
            await writes(*write_call(ops, EPOCH_KEY, epoch))

    async def complete(items: list[Prepared], early: list[Any], offsets: dict[Any, int], before: asyncio.Task[None] | None) -> None:
        try:
            await store(items)
            late = await send([p for p in items if p.ended is not None])
            await asyncio.gather(*early, *late)
            if before is not None:
                await before  # ended markers and commits in poll order
            await close(items)
            await consumer.commit(offsets)
        finally:
            slots.release()

    previous: asyncio.Task[None] | None = None
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=20, max_records=int(os.environ.get("RW_MAX_BATCH", "200")))
            records = [r for recs in batch.values() for r in recs]
            if not records:
                continue
            items = [table[(r.key, _seq(r.headers))] for r in records]
            fresh = [p.run for p in items if p.first and p.run is not None]
            if fresh:  # the worker reads the journal (and ended marker) of a run it meets mid-way
                await reads(*read_call(fresh, EPOCH_KEY, epoch))
            await slots.acquire()
            early = await send([p for p in items if p.ended is None])
            offsets = {tp: recs[-1].offset + 1 for tp, recs in batch.items() if recs}
            previous = asyncio.create_task(complete(items, early, offsets, previous))
        if previous is not None:
            await previous
    finally:
        await consumer.stop()
        await producer.stop()
        await redis.aclose()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
