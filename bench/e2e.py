"""End to end through the real broker and Redis (``make bench`` sections 3 and 5).

Theory of operation
-------------------
Three kinds of consumer process read the same generated ``reasoning.raw.v1``
records (every implemented grammar, runs interleaved 64 at a time, each run
closed by its ``end`` control record):

* the **worker** — ``python -m bench.worker_main``: the real normalizer worker
  (FastStream, translators, Redis journal + artefacts, AG-UI events out), on
  topics renamed with a per-measurement prefix so nothing else on the broker
  sees them (see ``bench.worker_main``); kind ``worker`` is the worker as
  shipped (OTel SDK and guards on, no exporter configured), kind
  ``worker-exporting`` the same exporting every span and metric (OTel's console
  exporter, into the process log), ``worker-exporting-sampled`` the same with
  1 % of runs traced (``parentbased_traceidratio``), kind ``worker-no-telemetry`` the same with
  ``reasonwire.workers.ops.telemetry`` replaced by a null object;
* the **passthrough** — ``python -m bench.passthrough``: bare aiokafka, same
  group semantics, batch size, poll timeout, producer acks and linger; it
  re-publishes each record unchanged and commits;
* the **pipelined passthrough** — the same with ``RW_BENCH_PIPELINED=1``: acks
  and commits complete in the background while the next batch is fetched, as
  the (pipelined) worker does; the serial one waits for a publish and a commit
  round trip per batch before it fetches again, which is most of its own
  latency, so it is the latency floor the worker is also compared with;
* the **librdkafka passthrough** — ``python -m bench.passthrough_librdkafka``: the
  pipelined passthrough on confluent-kafka (a C client) in a synchronous loop — context
  for ``bench.ab``: what aiokafka and the event loop cost a pipelined consumer;
* the **FastStream passthrough** — ``python -m bench.faststream_passthrough``:
  the same passthrough written as a FastStream app like the worker, to tell
  the framework's cost from ours.

Every measurement gets fresh topics and a fresh consumer group, so no priming
is needed (a fresh group starts at ``earliest`` of a topic nobody else writes);
the topics are deleted at the end.

**Throughput** (drain): the consumer process(es) start and take their
partitions, then the harness produces the backlog as fast as it can. It polls
the group's committed offsets every 100 ms; the rate is the slope of committed
records from the later of "backlog fully produced" and "10 % done" up to 90 %
done, so neither start-up nor the harness's own producing is in the window.
Offsets are committed only after a batch's outputs (and, for the worker, its
Redis writes) are acknowledged, so committed = done.

**Latency**: the consumer first drains a warm-up backlog of other runs (every
grammar: lazy imports and first-use costs are paid before the clock starts;
without it the worker spent the first seconds of a measurement catching up
with a start-up backlog, which showed as a falling series and inflated the
percentiles). Then records are sent at a fixed rate; the send time of each raw record
is kept. A collector in the harness reads the output topic and stamps each
output record on arrival: per output event, latency = arrival − send of the raw
record that produced it. For the passthrough that is the same record (found by
run id + ``rw-seq``); for the worker the harness runs the same sans-I/O
``Normalizer`` offline over the same records to know which raw record yields
which ``rw-event-seq`` (translators are deterministic). Added latency is the
worker's percentile minus the passthrough's at the same rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench import instructions
from bench.streams import runs, templates
from reasonwire.contracts import topics
from reasonwire.contracts.envelope import HEADER_EVENT_SEQ, HEADER_RUN_ID, HEADER_SEQ
from reasonwire.workers.core.normalizer import Normalizer, RawRecord
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.io.sse import ProviderEvent
from reasonwire.workers.translators import translator_for

ROOT = Path(__file__).resolve().parents[1]
PARTITIONS = 4
CONCURRENT_RUNS = 64
TENANT = "bench"
MODELS = {
    "anthropic-messages": "claude-sonnet-4-5",
    "openai-responses": "gpt-5",
    "gemini-generate-content": "gemini-3-flash-preview",
    "gemini-interactions": "gemini-3-flash-preview",
    "bedrock-converse": "us.anthropic.claude-sonnet-4-5-v1:0",
    "openai-chat-completions": "deepseek-v4-pro",
}
"""What an ingress puts in ``rw-model`` (the request's model); a stream naming its own model wins."""


@dataclass(frozen=True)
class Record:
    run_id: str
    seq: int
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]]


@dataclass
class Traffic:
    records: list[Record]
    event_source: dict[tuple[str, int], int] = field(default_factory=dict)
    """(run id, rw-event-seq on the events topic) → index of the raw record that produced it."""


def traffic(grammars: Sequence[str], n_records: int, *, seed: int, tag: str, map_events: bool = False) -> Traffic:
    """At least ``n_records`` raw records: runs of every grammar, interleaved as live traffic is."""
    rng = random.Random(seed)
    sources = {g: runs(templates(g), 10**9, seed=seed + i) for i, g in enumerate(grammars)}
    pending: list[list[Record]] = []
    out: list[Record] = []
    produced = 0
    run_no = 0

    def new_run() -> list[Record]:
        nonlocal run_no, produced
        grammar = grammars[run_no % len(grammars)]
        run_id = f"{tag}-{run_no}"
        run_no += 1
        env = RunEnvelope(grammar=grammar, run_id=run_id, thread_id=run_id, tenant=TENANT, model=MODELS.get(grammar))
        events = [ProviderEvent(i + 1, raw) for i, raw in enumerate(next(sources[grammar]))]
        recs = [Record(run_id, s, r.key, r.value, r.headers) for s, r in enumerate(raw_records(env, events))]
        produced += len(recs)
        return recs

    while len(pending) < CONCURRENT_RUNS:
        pending.append(new_run())
    while pending:
        i = rng.randrange(len(pending))
        out.append(pending[i].pop(0))
        if not pending[i]:
            pending.pop(i)
            if produced < n_records:
                pending.append(new_run())
    return Traffic(out, _event_sources(out) if map_events else {})


def _event_sources(records: Sequence[Record]) -> dict[tuple[str, int], int]:
    """Which raw record yields which events-topic record: the worker's own sans-I/O core, offline."""
    normalizer = Normalizer(translators=translator_for)
    mapping: dict[tuple[str, int], int] = {}
    for index, rec in enumerate(records):
        routed = normalizer.route(RawRecord(rec.key, rec.value, tuple(rec.headers)))
        step = normalizer.accept(routed, now=0.0)  # type: ignore[arg-type]
        for out in step.outbound:
            if out.topic == topics.EVENTS:
                mapping[(rec.run_id, int(out.header(HEADER_EVENT_SEQ) or -1))] = index
    return mapping


def fanout(records: Sequence[Record]) -> dict[str, float]:
    """Records the worker publishes per raw record, by topic (its sans-I/O core, offline)."""
    normalizer = Normalizer(translators=translator_for)
    counts: dict[str, int] = {}
    for rec in records:
        step = normalizer.accept(normalizer.route(RawRecord(rec.key, rec.value, tuple(rec.headers))), now=0.0)  # type: ignore[arg-type]
        for out in step.outbound:
            counts[out.topic] = counts.get(out.topic, 0) + 1
    per = {topic: n / len(records) for topic, n in counts.items()}
    return {"worker_outputs_per_record": sum(per.values()), **per}


# -- processes --------------------------------------------------------------------------


@dataclass
class Stage:
    """One measurement's topics and group."""

    bootstrap: str
    redis_url: str
    name: str
    prefix: str = ""
    group: str = ""

    def __post_init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.prefix = f"bench-{self.name}-{tag}."
        self.group = f"bench-{self.name}-{tag}"

    @property
    def source(self) -> str:
        return self.prefix + topics.RAW

    @property
    def sink(self) -> str:
        return self.prefix + topics.EVENTS

    def all_topics(self) -> list[str]:
        return [self.prefix + t for t in topics.ALL]


class Consumer:
    """A worker or passthrough OS process with its log."""

    def __init__(self, kind: str, stage: Stage, log: Path, extra_env: dict[str, str] | None = None, wrapper: Sequence[str] = ()) -> None:
        """``wrapper``: a command prefix the process starts under (``bench.instructions``)."""
        self.kind = kind
        self.counted: Path | None = None
        """Its callgrind output file when it runs under ``bench.instructions.wrapper``."""
        telemetry, pipelined, exporter, sampler = "on", "0", "none", {}
        if kind == "worker-no-telemetry":
            kind, telemetry = "worker", "off"
        if kind == "worker-exporting":  # spans and metrics exported (console exporter, into the log file)
            kind, exporter = "worker", "console"
        if kind == "worker-exporting-sampled":  # the same, 1 % of runs traced (the SDK's standard sampler settings)
            kind, exporter = "worker", "console"
            sampler = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}
        if kind == "passthrough-pipelined":
            kind, pipelined = "passthrough", "1"
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": stage.bootstrap,
            "REDIS_URL": stage.redis_url,
            "RW_GROUP_ID": stage.group,
            "RW_HEALTH_PORT": "0",  # several workers on one host: a taken probe port stops a worker
            "RW_PARTITIONS": str(PARTITIONS),
            "RW_BENCH_TOPIC_PREFIX": stage.prefix,
            "RW_BENCH_SOURCE": stage.source,
            "RW_BENCH_SINK": stage.sink,
            "RW_ARTEFACT_TTL_S": "900",
            "RW_JOURNAL_TTL_S": "900",
            "RW_INACTIVITY_TIMEOUT_S": "300",
            "RW_BENCH_TELEMETRY": telemetry,
            "RW_BENCH_PIPELINED": pipelined,
            "OTEL_TRACES_EXPORTER": exporter,
            "OTEL_METRICS_EXPORTER": exporter,
            "OTEL_LOGS_EXPORTER": "none",
            **sampler,
            **(extra_env or {}),
        }
        module = {
            "worker": "bench.worker_main",
            "faststream-passthrough": "bench.faststream_passthrough",
            "io-floor": "bench.io_floor",
            "passthrough-librdkafka": "bench.passthrough_librdkafka",
        }.get(kind, "bench.passthrough")
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen([*wrapper, sys.executable, "-m", module], env=env, cwd=ROOT, stdout=self._out, stderr=subprocess.STDOUT)

    def assigned(self) -> int | None:
        """Partitions in the latest assignment logged, or None before the first."""
        lines = [l for l in self.log.read_text(errors="replace").splitlines() if "assigned to partitions" in l]
        return len(re.findall(r"partition=\d+", lines[-1])) if lines else None

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.log.name} exited: {self.log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()


async def wait_assigned(consumers: Sequence[Consumer], timeout: float = 60) -> float:
    """Until every process holds its final share of the partitions; returns that moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.check_alive()
        counts = [c.assigned() for c in consumers]
        if all(n for n in counts) and sum(counts) == PARTITIONS:  # type: ignore[misc]
            return time.monotonic()
        await asyncio.sleep(0.1)
    raise RuntimeError(f"consumers never got all partitions: {[c.assigned() for c in consumers]}")


async def create_topics(stage: Stage) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=stage.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in stage.all_topics()])
    finally:
        await admin.close()
    await asyncio.sleep(0.5)  # leader election of the new partitions, or the first sends retry


async def delete_topics(bootstrap: str, names: list[str]) -> None:
    if not names:
        return
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        doomed = [t for t in names if t in existing]
        if doomed:
            await admin.delete_topics(doomed)
    finally:
        await admin.close()


async def delete_bench_keys(redis_url: str) -> int:
    """The worker's Redis state for the benchmark tenant (artefacts, indexes, ended markers)."""
    from redis.asyncio import Redis

    redis = Redis.from_url(redis_url)
    removed = 0
    try:
        batch: list[bytes] = []
        async for key in redis.scan_iter(match=f"rw:v1:{{{TENANT}/*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                removed += await redis.unlink(*batch)
                batch = []
        if batch:
            removed += await redis.unlink(*batch)
    finally:
        await redis.aclose()
    return removed


async def produce(bootstrap: str, topic: str, records: Sequence[Record]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for r in records:
            await producer.send(topic, r.value, key=r.key, headers=r.headers)
        await producer.flush()
    finally:
        await producer.stop()


# -- throughput -----------------------------------------------------------------------


def retag(records: Sequence[Record], old: str, new: str) -> list[Record]:
    """The same records under other run ids (``{old}-N`` → ``{new}-N``): every round of a worker
    needs runs it has never met (the runs of an earlier round have ended, in Redis too)."""
    out = []
    for r in records:
        run_id = new + r.run_id[len(old) :]
        key = run_id.encode()
        out.append(Record(run_id, r.seq, key, r.value, [(k, key if v == r.key else v) for k, v in r.headers]))
    return out


async def start_live(kind: str, stage: Stage, logs: Path, extra_env: dict[str, str] | None = None, *, counted: bool = False) -> Consumer:
    """A consumer process that stays up for every round (its start-up and group join are not
    in any measurement; a warm-up backlog pays its first-use costs). ``counted``: under
    callgrind, each drain's instructions counted (:mod:`bench.instructions`)."""
    await create_topics(stage)
    out = logs / f"{stage.name}.callgrind"
    for stale in (out, *logs.glob(f"{out.name}.*")):  # an earlier run's dumps: each drain's is told by being new
        stale.unlink(missing_ok=True)
    consumer = Consumer(kind, stage, logs / f"{stage.name}.log", extra_env, wrapper=instructions.wrapper(out) if counted else ())
    consumer.counted = out if counted else None
    await wait_assigned([consumer], timeout=60 * (instructions.SLOWDOWN_UNCOUNTED if counted else 1))
    return consumer


async def drain_live(consumer: Consumer, stage: Stage, records: Sequence[Record], profile: Path | None = None) -> dict[str, Any]:
    """One round: the backlog produced while the consumer is frozen (:func:`frozen`), then the
    committed-offset slope from its thaw (see :func:`drain`), counted from this round's start. Also the
    consumer process's CPU per record (user + system, from the backlog's first record to its
    last commit: idle polling before and after is left out only as far as the round is).
    ``profile``: py-spy samples the drain (idle threads left out), appended to that file as
    collapsed stacks (``bench.profiles.worker_profile`` reads them). A consumer under callgrind
    (:attr:`Consumer.counted`): also the instructions it executed per record, from the backlog's
    first record to its last commit."""
    total = len(records)
    admin = AIOKafkaAdminClient(bootstrap_servers=stage.bootstrap)
    await admin.start()
    samples: list[tuple[float, int]] = []
    try:
        base = await _committed(admin, stage.group)
        if consumer.counted is not None:
            await asyncio.to_thread(instructions.start, consumer.proc.pid)
        cpu_before = process_cpu_s(consumer.proc.pid)
        started = time.monotonic()
        with frozen([consumer]):
            await produce(stage.bootstrap, stage.source, records)
        produced_at = time.monotonic()
        part = profile.with_suffix(".part") if profile is not None else None
        spy = _py_spy(consumer.proc.pid, PROFILE_DRAIN_S, part) if part is not None else None
        deadline = time.monotonic() + 120 * (instructions.SLOWDOWN if consumer.counted is not None else 1)
        done = 0
        while done < total and time.monotonic() < deadline:
            consumer.check_alive()
            done = await _committed(admin, stage.group) - base
            samples.append((time.monotonic(), done))
            await asyncio.sleep(0.05)
        cpu_used = process_cpu_s(consumer.proc.pid) - cpu_before
        counted = await asyncio.to_thread(instructions.stop, consumer.proc.pid, consumer.counted) if consumer.counted is not None else None
        if spy is not None and profile is not None and part is not None:  # py-spy ends by itself after PROFILE_DRAIN_S
            await asyncio.to_thread(spy.wait)
            if part.exists():
                with profile.open("a") as out:
                    out.write(part.read_text())
                part.unlink()
    finally:
        await admin.close()
    return {
        "kind": consumer.kind,
        "records": total,
        "cpu_us_per_record": 1e6 * cpu_used / total,
        "instructions_per_record": None if counted is None else counted / total,
        "produce_s": produced_at - started,
        **_slope(samples, total, produced_at),
    }


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (``/proc/<pid>/stat``; 0.0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")



async def _committed(admin: AIOKafkaAdminClient, group: str) -> int:
    offsets = await admin.list_consumer_group_offsets(group)
    return sum(max(0, o.offset) for o in offsets.values())


async def drain(stage: Stage, kind: str, workers: int, records: Sequence[Record], logs: Path, *, profile_s: float = 0) -> dict[str, Any]:
    """Consumers up and holding their partitions, then the backlog (produced while they are
    frozen, :func:`frozen`); the committed-offset slope after it is the throughput."""
    await create_topics(stage)
    total = len(records)
    consumers = [Consumer(kind, stage, logs / f"{stage.name}-{i}.log") for i in range(workers)]
    admin = AIOKafkaAdminClient(bootstrap_servers=stage.bootstrap)
    await admin.start()
    samples: list[tuple[float, int]] = []
    spy: subprocess.Popen[bytes] | None = None
    try:
        await wait_assigned(consumers)
        with frozen(consumers):
            await produce(stage.bootstrap, stage.source, records)
        produced_at = time.monotonic()
        if profile_s:
            spy = _py_spy(consumers[0].proc.pid, profile_s, logs / f"{stage.name}.pyspy.txt")
        deadline = time.monotonic() + 120
        done = 0
        while done < total and time.monotonic() < deadline:
            for c in consumers:
                c.check_alive()
            done = await _committed(admin, stage.group)
            samples.append((time.monotonic(), done))
            await asyncio.sleep(0.1)
        if spy is not None:
            spy.wait(profile_s + 30)
    finally:
        await admin.close()
        for c in consumers:
            c.stop()
    return {"kind": kind, "processes": workers, "records": total, **_slope(samples, total, produced_at)}


@contextlib.contextmanager
def frozen(consumers: Sequence[Consumer]) -> Iterator[None]:
    """The consumer processes stopped (SIGSTOP) while the backlog is produced, thawed after.

    A drain round measures consumption, not the race between one Python producer and the
    consumer: on an idle host a pipelined passthrough drained 20–26k records/s, faster than
    the backlog could be produced, so the consumer was always caught up and the round had no
    slope to measure ("the backlog drained before it was fully produced"). Frozen, the
    consumer finds the whole backlog waiting, whatever the host's speed, and a stopped
    process spends no CPU, so CPU per record is unchanged. Its group membership survives as
    long as producing takes less than the group's ``session.timeout.ms`` (aiokafka's default is 10 s;
    ``produce_s`` in each round's result says how long it took)."""
    pids = [c.proc.pid for c in consumers]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def _slope(samples: list[tuple[float, int]], total: int, produced_at: float) -> dict[str, Any]:
    """Records per second from the later of (backlog produced, 10 % done) to 90 % done."""
    if not samples or samples[-1][1] < 0.9 * total:
        raise RuntimeError(f"only {samples[-1][1] if samples else 0} of {total} records were consumed in time")
    start_t, start_n = samples[0]
    for t, n in samples:
        if n >= 0.1 * total and t >= produced_at:
            start_t, start_n = t, n
            break
    end_t, end_n = next((t, n) for t, n in samples if n >= 0.9 * total)
    if end_t <= start_t:
        raise RuntimeError("the backlog drained between two samples: make it larger")
    return {
        "records_per_s": (end_n - start_n) / (end_t - start_t),
        "window_s": end_t - start_t,
        "window_records": end_n - start_n,
        "done_when_produced": start_n / total,
    }


# -- latency -------------------------------------------------------------------------------


async def latency(
    stage: Stage,
    kind: str,
    tr: Traffic,
    rate: float,
    logs: Path,
    *,
    warmup_s: float = 1.0,
    warm: Sequence[Record] = (),
    live: Consumer | None = None,
) -> dict[str, Any]:
    """Latency per output at a fixed send rate. ``warm``: records of other runs drained before
    the timed sending starts, so first-use costs (lazy imports, each grammar's first run) are
    not in the measurement; the first ``warmup_s`` of timed sending is left out as well.
    ``live``: a consumer already running on ``stage`` (warmed by earlier rounds): the
    collector starts at the end of its output topic."""
    if live is None:
        await create_topics(stage)
    consumer = live or Consumer(kind, stage, logs / f"{stage.name}.log")
    collector = AIOKafkaConsumer(bootstrap_servers=stage.bootstrap, group_id=None, auto_offset_reset="earliest")
    producer = AIOKafkaProducer(bootstrap_servers=stage.bootstrap, acks="all")
    await collector.start()
    await producer.start()
    collector.assign([TopicPartition(stage.sink, p) for p in range(PARTITIONS)])
    if live is not None:
        await collector.seek_to_end()
        for p in range(PARTITIONS):
            await collector.position(TopicPartition(stage.sink, p))  # resolved now, before sending
    sent_ns: list[int] = [0] * len(tr.records)
    arrivals: list[tuple[int, int]] = []  # (raw record index, arrival ns)
    index_of = {(r.run_id, r.seq): i for i, r in enumerate(tr.records)}
    stop = asyncio.Event()

    async def collect() -> None:
        while not stop.is_set():
            batch = await collector.getmany(timeout_ms=50)
            now = time.time_ns()
            for recs in batch.values():
                for m in recs:
                    h = dict(m.headers)
                    run_id = h[HEADER_RUN_ID].decode()
                    if kind.startswith("worker"):
                        src = tr.event_source.get((run_id, int(h[HEADER_EVENT_SEQ])))
                    else:
                        src = index_of.get((run_id, int(h[HEADER_SEQ])))
                    if src is not None:
                        arrivals.append((src, now))

    try:
        if live is None:
            await wait_assigned([consumer])
        warm_s = await warm_up(stage, consumer, warm) if warm else 0.0
        task = asyncio.create_task(collect())
        cpu_before = process_cpu_s(consumer.proc.pid)
        start = time.perf_counter()
        for i, r in enumerate(tr.records):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0.0005:
                await asyncio.sleep(delay)
            sent_ns[i] = time.time_ns()
            await producer.send(stage.source, r.value, key=r.key, headers=r.headers)
        await producer.flush()
        send_s = time.perf_counter() - start
        expected = len(tr.event_source) if kind.startswith("worker") else len(tr.records)
        deadline = time.monotonic() + 30
        while len(arrivals) < expected and time.monotonic() < deadline:
            consumer.check_alive()
            await asyncio.sleep(0.1)
        stop.set()
        await task
        measured_until = time.perf_counter()
        cpu_s = process_cpu_s(consumer.proc.pid) - cpu_before
    finally:
        await producer.stop()
        await collector.stop()
        if live is None:
            consumer.stop()
    first_measured = int(warmup_s * rate)
    lat_us = sorted((now - sent_ns[src]) / 1000 for src, now in arrivals if src >= first_measured)
    by_class = _by_class(tr.records, [(src, (now - sent_ns[src]) / 1000) for src, now in arrivals if src >= first_measured])
    # median latency per half second of sending: flat = keeping up, rising = queueing
    per_slot: dict[int, list[float]] = {}
    for src, now in arrivals:
        per_slot.setdefault(int(src / rate * 2), []).append((now - sent_ns[src]) / 1000)
    series = [round(statistics.median(per_slot[k]) / 1000, 2) for k in sorted(per_slot)]
    return {
        "kind": kind,
        "target_rate": rate,
        "achieved_send_rate": len(tr.records) / send_s,
        "outputs_expected": expected,
        "outputs_seen": len(arrivals),
        "p50_us": _pct(lat_us, 50),
        "p90_us": _pct(lat_us, 90),
        "p99_us": _pct(lat_us, 99),
        "max_us": lat_us[-1] if lat_us else None,
        "mean_us": statistics.fmean(lat_us) if lat_us else None,
        "by_class": by_class,
        "median_ms_per_half_second": series,
        # the consumer's CPU from the first record sent to the last output seen: at a fixed rate its
        # cores are what the rate costs (a poll's fixed work is paid per few records when they trickle)
        "consumer_cores": cpu_s / (measured_until - start),
        "warm_up_records": len(warm),
        "warm_up_drained_s": warm_s,
        # the measured window on time.perf_counter() (CLOCK_MONOTONIC, the same in the worker):
        # what the worker's hand-off samples (workers/ops/handoff.py) are cut to
        "window_perf": [start + warmup_s, measured_until],
    }


RECORD_CLASSES = ("first", "last", "other")
"""A raw record's place in its run: its first (a run new to the worker: its outputs wait for the
run's first Redis write), its last (the run's end: its outputs wait for their poll's write), or one
between (sent as the record is stepped)."""


def _by_class(records: Sequence[Record], latencies: Sequence[tuple[int, float]]) -> dict[str, dict[str, Any]]:
    """Outputs' latency by their raw record's place in its run (``RECORD_CLASSES``): which of them
    make the tail. Per class: outputs seen, their share of all, p50 and p99 in µs."""
    last: dict[str, int] = {}
    for r in records:
        last[r.run_id] = max(last.get(r.run_id, -1), r.seq)
    groups: dict[str, list[float]] = {c: [] for c in RECORD_CLASSES}
    for src, us in latencies:
        r = records[src]
        groups["first" if r.seq == 0 else "last" if r.seq == last[r.run_id] else "other"].append(us)
    total = max(1, len(latencies))
    out = {}
    for name, values in groups.items():
        values.sort()
        out[name] = {"n": len(values), "share": len(values) / total, "p50_us": _pct(values, 50), "p99_us": _pct(values, 99)}
    return out


async def warm_up(stage: Stage, consumer: Consumer, warm: Sequence[Record]) -> float:
    """Produce ``warm`` as a backlog and wait until the consumer committed all of it."""
    started = time.monotonic()
    admin = AIOKafkaAdminClient(bootstrap_servers=stage.bootstrap)
    await admin.start()
    base = await _committed(admin, stage.group)
    await produce(stage.bootstrap, stage.source, warm)
    limit_s = 60 * (instructions.SLOWDOWN_UNCOUNTED if consumer.counted is not None else 1)
    try:
        deadline = time.monotonic() + limit_s
        while await _committed(admin, stage.group) < base + len(warm):
            consumer.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{stage.name}: the warm-up backlog was not consumed in {limit_s} s")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
    return time.monotonic() - started


def _pct(sorted_values: list[float], p: float) -> float | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


# -- profile ----------------------------------------------------------------------------------


PROFILE_DRAIN_S = 3
"""Seconds py-spy samples a profiled drain (a 40,000-record backlog drains in about that)."""


def _py_spy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes] | None:
    exe = Path(sys.executable).with_name("py-spy")
    if not exe.exists():
        return None
    # --native (C frames of the compiled core) needs py-spy to stop the process per sample
    native = ["--native"] if os.environ.get("RW_SPY_NATIVE") else ["--nonblocking"]
    return subprocess.Popen(
        [str(exe), "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "200", "--format", "raw", *native, "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
