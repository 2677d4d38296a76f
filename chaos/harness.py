"""The chaos run: scenarios (load + one fault each), then one verification and one table.

See chaos/__init__.py for what is measured and docs/reliability.md for a run's table.
"""

from __future__ import annotations

import asyncio
import contextlib
import platform
import re
import random
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.errors import MessageSizeTooLargeError, TopicAlreadyExistsError
from redis.asyncio import Redis

from chaos.load import TERMINAL, BadCase, Run, bad_cases, expiry_end, fed_only, make_run, templates
from chaos.services import Services, Worker
from reasonwire.contracts import topics
from reasonwire.contracts.replay import ReplayRequest, ReplayTarget

Fault = Callable[["Chaos"], Awaitable[None]]


@dataclass
class Scenario:
    name: str
    runs: int
    seconds: float
    faults: list[tuple[float, str, Fault]] = field(default_factory=list)
    """(seconds after the load starts, description, action)."""
    notes: list[str] = field(default_factory=list)
    timeout_s: float = 30.0
    """The workers' ``RW_INACTIVITY_TIMEOUT_S`` during this scenario (they are restarted with it)."""
    concurrency: int = 40
    """Runs open at once in the load (a burst backlog opens all of them together)."""
    linger_s: float = 0.0
    """Seconds to wait after the load is consumed: expiry ticks that act late (a stale copy of a
    run, a thawed worker) get their chance before the next scenario."""
    check_artefacts: bool = False
    """At the scenario's end, count its runs whose artefacts are not all in Redis."""
    log_budget: int | None = None
    """Bytes of worker log the whole scenario may write (``None``: reported only)."""
    arrival_s: float | None = None
    """Record timestamps (CreateTime: when the ingress took each record) spread over this many
    seconds instead of the send time: a burst that many ingress replicas took in faster than
    this one producer can publish it."""
    vanish: float = 0.0
    """Share of the runs whose producer vanishes mid-run: their last records, the end record
    included, are never sent. Each must still end (``RUN_ERROR inactivity_timeout``) within the
    timeout and one poll of the moment the worker can see time pass again (:meth:`Chaos.vanished_ended`)."""
    faketime: bool = False
    """Worker A runs under libfaketime for this scenario (its clock offset in ``state/faketime``)."""


@dataclass
class Usage:
    """What the worker processes (normalizer A, B and the replay worker) spent over one scenario."""

    log_bytes: int
    cpu_s: float
    span_s: float

    @property
    def cpu_pct(self) -> float:
        return 100 * self.cpu_s / self.span_s if self.span_s else 0.0


@dataclass
class Measure:
    """A figure measured during one window (the Redis outage, the broker restart)."""

    name: str
    value: str
    target: str
    ok: bool | None


class Chaos:
    """Owns the services, the workers, the load and the findings of one chaos run."""

    def __init__(self, out: Path, services: Services, *, scale: float = 1.0, seed: int = 13, tree: Path | None = None) -> None:
        self.out = out
        self.services = services
        self.scale = scale
        self.rng = random.Random(seed)
        self.group = f"rw-chaos-{uuid.uuid4().hex[:6]}"
        self.workers = {
            name: Worker(name, services, self.group, out, health_port=services.redis_port + 3 + i, tree=tree or Path(__file__).resolve().parents[1],
                         kind="replay" if name == "R" else "normalize")
            for i, name in enumerate(("A", "B", "R"))
        }
        self.runs: list[Run] = []
        self.bad: list[BadCase] = []
        self.measures: list[Measure] = []
        self.unsent = 0
        """Raw records the load producer could not publish (their runs then look lost: not the worker's fault)."""
        self.wedged: dict[str, list[int]] = {}
        """Scenario → raw partitions still uncommitted 60 s after its load ended."""
        self.usage: dict[str, Usage] = {}
        """Scenario → worker log bytes and CPU over it (load, faults, drain, linger)."""
        self.artefacts_missing: dict[str, int] = {}
        """Scenario (``check_artefacts``) → its runs with an artefact no longer in Redis."""
        self.budgets: dict[str, int] = {}
        self.last_sent: dict[str, float] = {}
        """Run id → when its last record was sent (monotonic): a vanished producer's moment."""
        self.resumed_at = 0.0
        """When the last pause of a worker ended (monotonic): a stalled worker sees time pass from then."""
        self.readyz_recoveries: list[float] = []
        """Seconds from Redis back (``services.up`` returned) to ``/readyz`` 200, per Redis outage measured."""
        self.producer: AIOKafkaProducer | None = None
        self.paused = asyncio.Event()
        self.paused.set()
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[chaos {time.monotonic() - self.t0:6.1f}s] {text}", flush=True)

    # -- the load -------------------------------------------------------------------------

    async def start_producer(self) -> None:
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.services.bootstrap, acks="all", linger_ms=5, max_request_size=4 * 1024 * 1024,
            request_timeout_ms=60_000, enable_idempotence=True,  # retries across a broker restart keep each run's order
        )
        await self.producer.start()

    async def produce(self, runs: list[Run], seconds: float, concurrency: int = 40, arrival_s: float | None = None) -> None:
        """Interleave the runs' records (each run in order) evenly over ``seconds``, ``concurrency``
        runs open at a time; with ``arrival_s``, timestamped as taken in over that many seconds."""
        assert self.producer is not None
        queues = [list(r.records) for r in runs]
        total = sum(len(q) for q in queues)
        if not total:
            return
        start, sent, active, cursor = time.monotonic(), 0, [], 0
        start_ms = int(time.time() * 1000)
        acks: list[asyncio.Future[Any]] = []
        pending = sorted(range(len(queues)), key=lambda i: i)
        while sent < total:
            while len(active) < concurrency and pending:
                active.append(pending.pop(0))
            i = active[cursor % len(active)]
            record = queues[i].pop(0)
            if not queues[i]:
                active.remove(i)
                self.last_sent[runs[i].run_id] = time.monotonic()
            else:
                cursor += 1
            await self.paused.wait()
            if len(record.value or b"") > 512 * 1024:  # alone in its batch, as the probe measured it
                await self.producer.flush()
            stamp = start_ms + int(1000 * arrival_s * sent / total) if arrival_s is not None else None
            acks.append(await self.producer.send(topics.RAW, record.value, key=record.key, headers=record.headers, timestamp_ms=stamp))
            sent += 1
            ahead = start + seconds * sent / total - time.monotonic()
            if ahead > 0.005:
                await asyncio.sleep(ahead)
        await self.producer.flush()
        failed = [r for r in await asyncio.gather(*acks, return_exceptions=True) if isinstance(r, BaseException)]
        self.unsent += len(failed)  # the load's own losses: not the worker's
        if failed:
            self.say(f"  the load producer failed to publish {len(failed)} records ({type(failed[0]).__name__})")

    async def replay_requests(self, prefix: str, n: int) -> set[str]:
        """Publish ``n`` replay requests (threads of runs already done; an empty history: the
        worker still reads the thread's artefacts from Redis); their request ids."""
        assert self.producer is not None
        done = [r for r in self.runs if r.expect == "complete"] or self.runs
        ids = set()
        for i in range(n):
            run = done[i % len(done)]
            request = ReplayRequest(request_id=f"{prefix}-{uuid.uuid4().hex[:10]}", tenant=run.envelope.tenant,
                                    thread_id=run.envelope.thread_id, target=ReplayTarget(grammar=run.envelope.grammar), history=[])
            await self.producer.send(topics.REPLAY_REQUESTS, request.model_dump_json(by_alias=True, exclude_none=True).encode(),
                                     key=run.envelope.thread_id.encode())
            ids.add(request.request_id)
        await self.producer.flush()
        return ids

    async def huge_value_size(self) -> int:
        """The largest value the broker takes on a raw-topic-like topic with a run's headers: its
        dead letter (the same bytes plus a reason header) then does not fit the DLQ."""
        assert self.producer is not None
        headers = make_run(templates()[0], "probe", 0).records[0].headers
        admin = AIOKafkaAdminClient(bootstrap_servers=self.services.bootstrap)
        await admin.start()
        try:  # the broker creates no topic by itself (deploy/services.sh): the broker's defaults, 1 partition
            await admin.create_topics([NewTopic("chaos.probe", 1, 1)])
        except TopicAlreadyExistsError:
            pass
        finally:
            await admin.close()
        size = 1_048_576
        while size > 1_000_000:
            try:
                await self.producer.send_and_wait("chaos.probe", b"x" * size, key=b"bad_huge-00000-probe", headers=headers)
                return size
            except MessageSizeTooLargeError:
                size -= 64
        return size

    # -- workers and probes -----------------------------------------------------------------

    def start_worker(self, name: str) -> None:
        worker = self.workers[name]
        worker.start()
        if not worker.wait_assigned():
            self.say(f"worker {name} did not get partitions in time (see {worker.logs[-1]})")

    def readyz(self, name: str) -> int:
        return self.readyz_body(name)[0]

    def readyz_body(self, name: str) -> tuple[int, dict[str, Any]]:
        """``/readyz`` of worker ``name``: its status (0: no answer) and its JSON body (``{}`` if none)."""
        port = self.workers[name].health_port
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=6) as response:
                return int(response.status), _json_body(response.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), _json_body(exc.read())
        except Exception:
            return 0, {}

    async def lag(self) -> dict[int, int]:
        """Raw records not committed by the group, per partition."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.services.bootstrap)
        consumer = AIOKafkaConsumer(bootstrap_servers=self.services.bootstrap)
        await admin.start()
        await consumer.start()
        try:
            committed = await admin.list_consumer_group_offsets(self.group)
            parts = [TopicPartition(topics.RAW, p) for p in sorted(consumer.partitions_for_topic(topics.RAW) or ())]
            if not parts:
                await consumer._client.force_metadata_update()  # noqa: SLF001
                parts = [TopicPartition(topics.RAW, p) for p in sorted(consumer.partitions_for_topic(topics.RAW) or ())]
            ends = await consumer.end_offsets(parts)
            return {tp.partition: ends[tp] - (committed[tp].offset if tp in committed else 0) for tp in parts}
        finally:
            await consumer.stop()
            await admin.close()

    async def settle(self, timeout: float) -> dict[int, int]:
        deadline = time.monotonic() + timeout
        lag: dict[int, int] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                lag = await self.lag()
                if lag and not any(lag.values()):
                    return lag
            await asyncio.sleep(1.0)
        return lag

    # -- scenarios ------------------------------------------------------------------------------

    async def configure(self, timeout_s: float) -> None:
        """Restart the normalizers that run with another inactivity timeout (the paused-worker
        scenarios use a short one); a stopped worker takes it at its next start."""
        for name in ("A", "B"):
            worker = self.workers[name]
            if worker.timeout_s != timeout_s:
                worker.timeout_s = timeout_s
                if worker.alive:
                    self.say(f"  restarting worker {name} with RW_INACTIVITY_TIMEOUT_S={timeout_s:g}")
                    await asyncio.to_thread(worker.stop)
                    await asyncio.to_thread(self.start_worker, name)

    def _spent(self) -> tuple[int, float]:
        return sum(w.log_bytes() for w in self.workers.values()), sum(w.cpu_total() for w in self.workers.values())

    async def run_scenario(self, scenario: Scenario, extra: list[Run] | None = None) -> None:
        await self.configure(scenario.timeout_s)
        if not self.workers["A"].alive:
            await asyncio.to_thread(self.start_worker, "A")
        base = templates()
        runs = [make_run(base[i % len(base)], scenario.name, i) for i in range(max(1, int(scenario.runs * self.scale)))]
        self.rng.shuffle(runs)
        vanishing = runs[: int(len(runs) * scenario.vanish)]
        for run in vanishing:  # the producer vanishes after a few records: no end record ever comes
            run.records = run.records[: self.rng.randint(2, max(2, len(run.records) - 2))]
            run.reference = fed_only(run.envelope, run.records)
            run.end = expiry_end(run.envelope, run.records)
            run.expect = "vanished"
        clock = self.workers["A"]
        if scenario.faketime:
            clock.clock_file = self.services.state / "faketime"
            clock.clock_file.write_text("+0\n")
            self.say("  restarting worker A under libfaketime")
            await asyncio.to_thread(clock.stop)
            await asyncio.to_thread(self.start_worker, "A")
        runs += extra or []
        self.runs += runs
        self.say(f"scenario {scenario.name}: {len(runs)} runs, {sum(len(r.records) for r in runs)} records over {scenario.seconds:.0f}s")
        (logs0, cpu0), t0 = self._spent(), time.monotonic()
        load = asyncio.create_task(self.produce(runs, scenario.seconds, scenario.concurrency, scenario.arrival_s))
        load.add_done_callback(lambda _: self.say(f"  load published in {time.monotonic() - t0:.1f}s"))
        start = time.monotonic()
        for at, description, action in scenario.faults:
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            self.say(f"  fault at {time.monotonic() - start:5.1f}s: {description}")
            await action(self)
        await load
        if vanishing:
            await self.vanished_ended(scenario, vanishing)
        if scenario.faketime and clock.clock_file is not None:
            clock.clock_file = None  # the next start runs on the real clock
            await asyncio.to_thread(clock.stop)
            await asyncio.to_thread(self.start_worker, "A")
        lag = await self.settle(60)
        self.wedged[scenario.name] = sorted(p for p, n in lag.items() if n)
        self.say(f"  settled: lag {sum(lag.values()) if lag else '?'}")
        if scenario.linger_s:
            await asyncio.sleep(scenario.linger_s)
        (logs1, cpu1), t1 = self._spent(), time.monotonic()
        self.usage[scenario.name] = Usage(logs1 - logs0, cpu1 - cpu0, t1 - t0)
        if scenario.log_budget is not None:
            self.budgets[scenario.name] = scenario.log_budget
        if scenario.check_artefacts:
            self.artefacts_missing[scenario.name] = await self.missing_artefacts(runs)
        for name in ("B", "R"):  # every scenario starts with worker A alone
            await asyncio.to_thread(self.workers[name].stop)

    async def vanished_ended(self, scenario: Scenario, runs: list[Run]) -> None:
        """Wait until the timeout and one poll (an expiry interval, a second of slack) have passed
        since the later of the vanished producers' last records and the worker's last pause; then
        count the runs with no terminal event yet (what a UI would still wait on)."""
        interval = max(0.05, min(scenario.timeout_s / 4, 5.0))
        since = max(max(self.last_sent.get(r.run_id, 0.0) for r in runs), self.resumed_at)
        bound = scenario.timeout_s + 2 * interval + 1.0
        await asyncio.sleep(max(0.0, since + bound - time.monotonic()))
        seen = await collect(self.services.bootstrap)
        open_runs = [r.run_id for r in runs if not _terminals(seen.events.get(r.run_id, {}))]
        self.say(f"  vanished producers: {len(runs) - len(open_runs)} of {len(runs)} runs ended within {bound:.1f}s")
        if not scenario.faketime:  # the worker's record timestamps are on the harness's clock
            self.say_end_times(runs, seen)
        self.measures.append(Measure(
            f"{scenario.name}: runs of a vanished producer without a terminal event {bound:.0f}s (timeout + one poll) after it vanished",
            f"{len(open_runs)} of {len(runs)}", "0", not open_runs,
        ))

    def say_end_times(self, runs: list[Run], seen: Observed) -> None:
        """How long after its producer vanished (its last record, or the worker's resumption if
        later) each run's terminal event was produced — median and slowest, by the worker's
        record timestamps — so a verdict shows its margin."""
        wall = time.time() - time.monotonic()
        after = sorted(
            (seen.ended_ms[r.run_id] / 1000 - wall - max(self.last_sent.get(r.run_id, 0.0), self.resumed_at), r.run_id)
            for r in runs if r.run_id in seen.ended_ms
        )
        if after:
            self.say(f"    ended after: median {after[len(after) // 2][0]:.1f}s, slowest {after[-1][0]:.1f}s ({after[-1][1]})")

    async def missing_artefacts(self, runs: list[Run]) -> int:
        """Runs (finished) with fewer artefacts in Redis than the offline translation stored."""
        redis = Redis.from_url(self.services.redis_url)
        missing = 0
        try:
            for run in runs:
                if not run.artefact_keys:
                    continue
                present = await redis.exists(*run.artefact_keys)
                missing += present < len(run.artefact_keys)
        finally:
            await redis.aclose()
        return missing


# -- faults -----------------------------------------------------------------------------------------


def _json_body(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return body if isinstance(body, dict) else {}


def kill(name: str, restart_after: float = 1.0) -> Fault:
    async def act(chaos: Chaos) -> None:
        chaos.workers[name].kill()
        await asyncio.sleep(restart_after)
        await asyncio.to_thread(chaos.start_worker, name)

    return act


def start(name: str) -> Fault:
    async def act(chaos: Chaos) -> None:
        await asyncio.to_thread(chaos.start_worker, name)

    return act


def stop(name: str) -> Fault:
    async def act(chaos: Chaos) -> None:
        await asyncio.to_thread(chaos.workers[name].stop)

    return act


def redis_stop(mode: str) -> Fault:
    async def act(chaos: Chaos) -> None:
        await asyncio.to_thread(chaos.services.redis_stop, mode)

    return act


def redis_up() -> Fault:
    async def act(chaos: Chaos) -> None:
        await asyncio.to_thread(chaos.services.up)

    return act


def redis_outage(seconds: float) -> Fault:
    """Redis away for ``seconds`` under load: worker log bytes and CPU over the window, readiness."""

    async def act(chaos: Chaos) -> None:
        alive = [w for w in chaos.workers.values() if w.alive]
        logs0, cpu0, t0 = sum(w.log_bytes() for w in alive), sum(w.cpu_seconds() for w in alive), time.monotonic()
        await asyncio.to_thread(chaos.services.redis_stop, "save")
        await asyncio.sleep(min(8.0, seconds / 2))
        during = await asyncio.to_thread(chaos.readyz, "A")
        await asyncio.sleep(max(0.0, t0 + seconds - time.monotonic()))
        logs1, cpu1, t1 = sum(w.log_bytes() for w in alive), sum(w.cpu_seconds() for w in alive), time.monotonic()
        answered = asyncio.create_task(_redis_answers(chaos.services.redis_port))  # when Redis takes commands again
        await asyncio.to_thread(chaos.services.up)
        back = time.monotonic()
        after, waited, timeline = 0, 0.0, []
        while time.monotonic() - back < 30:
            after, body = await asyncio.to_thread(chaos.readyz_body, "A")
            timeline.append((time.time(), time.monotonic() - back, after, body))
            if after == 200:
                break
            await asyncio.sleep(0.2)
        waited = time.monotonic() - back
        first = await answered
        chaos.readyz_recoveries.append(waited)
        _write_readyz_timeline(chaos.out / f"readyz_after_redis.{len(chaos.readyz_recoveries)}.txt", back, first, timeline)
        chaos.say(f"  /readyz {after} {waited:.1f}s after Redis was back ({first - back:+.1f}s: Redis answered its first command)")
        span = t1 - t0
        chaos.measures += [
            Measure(f"worker log bytes during a {span:.0f}s Redis outage under load", f"{logs1 - logs0:,}", "< 10,240", logs1 - logs0 < 10_240),
            Measure("worker CPU during the outage", f"{100 * (cpu1 - cpu0) / span:.1f} % of a core", "< 5 %", (cpu1 - cpu0) / span < 0.05),
            Measure("/readyz while Redis is down", str(during), "503", during == 503),
            Measure("/readyz after Redis is back", f"{after} after {waited:.1f}s", "200 within one backoff step (5 s) + probe",
                    after == 200 and waited <= 7.0),
        ]

    return act


async def _redis_answers(port: int, limit_s: float = 60.0) -> float:
    """Monotonic time at which Redis first answered ``PING`` with ``PONG`` — when it is back for a
    client, just before ``services.up`` returns (deploy/services.sh waits for that ``PONG``: a
    restarted Redis answers LOADING while it reads its AOF). A bare socket every 20 ms: no
    client-side retry or backoff between attempts to blur the moment."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 0.5)
            try:
                writer.write(b"PING\r\n")
                if await asyncio.wait_for(reader.readline(), 0.5) == b"+PONG\r\n":
                    return time.monotonic()
            finally:
                writer.close()
        await asyncio.sleep(0.02)
    return float("nan")


def _write_readyz_timeline(path: Path, back: float, first: float, timeline: list[tuple[float, float, int, dict[str, Any]]]) -> None:
    """Each ``/readyz`` asked after the Redis outage: wall clock (to match the worker's log),
    seconds since ``services.up`` returned, the status and why it was not ready."""
    lines = [f"Redis answered its first command {first - back:+.2f}s from 'up' returned"]
    for wall, since, status, body in timeline:
        stamp = time.strftime("%H:%M:%S", time.gmtime(wall)) + f".{int(wall % 1 * 1000):03d}"
        why = {k: body.get(k) for k in ("redis", "kafka", "degraded", "consumer_started") if k in body}
        lines.append(f"{stamp} +{since:5.2f}s {status} {why}")
    path.write_text("\n".join(lines) + "\n")


def broker_restart() -> Fault:
    async def act(chaos: Chaos) -> None:
        chaos.paused.clear()  # the ingress holds its records while the broker is away
        assert chaos.producer is not None
        await chaos.producer.flush()
        alive = [w for w in chaos.workers.values() if w.alive]
        logs0, t0 = sum(w.log_bytes() for w in alive), time.monotonic()
        await asyncio.to_thread(chaos.services.kafka_stop)
        await asyncio.sleep(10)
        during = await asyncio.to_thread(chaos.readyz, "A")
        await asyncio.to_thread(chaos.services.up)
        logs1, span = sum(w.log_bytes() for w in alive), time.monotonic() - t0
        chaos.paused.set()
        chaos.measures += [
            Measure(f"worker log bytes while the broker was stopped ({span:.0f}s)", f"{logs1 - logs0:,}", "< 10,240", logs1 - logs0 < 10_240),
            Measure("/readyz while the broker is down", str(during), "503", during == 503),
        ]

    return act


def broker_kill(node: int, down_s: float) -> Fault:
    """SIGKILL one broker of a replicated cluster mid-stream: producers with
    ``acks=all`` and idempotence, RF 3 and ``min.insync.replicas`` 2 lose nothing; the worker carries on."""

    async def act(chaos: Chaos) -> None:
        await asyncio.to_thread(chaos.services.broker, "kill-kafka", node)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(chaos.services.broker, "start-kafka", node)

    return act


def pause(name: str, seconds: float, meanwhile: Fault | None = None) -> Fault:
    """SIGSTOP the worker for ``seconds``, then SIGCONT (a GC or VM pause): its clock runs on,
    its records wait in the partition. ``meanwhile``: a fault done
    right after the freeze, which the frozen worker cannot notice (a restored Redis: the other
    workers must tell, by their own write counts or by the frozen one's in its last commits)."""

    async def act(chaos: Chaos) -> None:
        chaos.workers[name].pause()
        try:
            if meanwhile is not None:
                await meanwhile(chaos)
            await asyncio.sleep(seconds)
        finally:
            chaos.workers[name].resume()
            chaos.resumed_at = time.monotonic()

    return act


def clock_jump(name: str, offset: str) -> Fault:
    """Jump the clock of worker ``name`` (running under libfaketime) by ``offset`` (``+1h``): its
    wall and monotonic clocks both move at once, as after a VM resumed or an NTP step."""

    async def act(chaos: Chaos) -> None:
        clock_file = chaos.workers[name].clock_file
        assert clock_file is not None, "the scenario runs the worker under libfaketime (faketime=True)"
        clock_file.write_text(f"{offset}\n")
        chaos.resumed_at = time.monotonic()

    return act


def raw_partitions(total: int) -> Fault:
    """Add partitions to ``reasoning.raw.v1`` mid-stream and switch the load producer to the new
    partitioning at once (an ingress whose metadata refreshed). A run whose new
    partition is the other worker's is restored there from its journal and finished, while its
    old owner still holds it in memory; records on the new partitions wait until the group reads
    them: the workers refresh their metadata every eighth of the inactivity timeout (1 s here),
    and the leader's refresh rebalances the group (before that, aiokafka's 5 min: the moved runs
    timed out on their old partitions first). The rolling restart that follows
    (:func:`restart`) is the documented procedure's."""

    async def act(chaos: Chaos) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=chaos.services.bootstrap)
        await admin.start()
        try:
            await admin.create_partitions({topics.RAW: NewPartitions(total_count=total)})
        finally:
            await admin.close()
        assert chaos.producer is not None
        await chaos.producer.client.force_metadata_update()

    return act


def redis_snapshot() -> Fault:
    """Copy Redis's files now: the older copy a later fault restores."""

    async def act(chaos: Chaos) -> None:
        await asyncio.to_thread(chaos.services.redis_snapshot, chaos.services.state / "redis-copy")

    return act


def redis_restore() -> Fault:
    """Redis stopped and started again from the older copy (same epoch: looks intact)."""

    async def act(chaos: Chaos) -> None:
        await asyncio.to_thread(chaos.services.redis_restore, chaos.services.state / "redis-copy")
        await asyncio.to_thread(chaos.services.up)

    return act


def redis_config(*pairs: str) -> Fault:
    """``CONFIG SET`` on the running Redis (``appendonly no``; the eviction policy back)."""

    async def act(chaos: Chaos) -> None:
        chaos.say(f"    CONFIG SET {' '.join(pairs)}: {chaos.services.redis_cli('CONFIG', 'SET', *pairs)}")

    return act


def redis_evicting() -> Fault:
    """``maxmemory-policy volatile-lru`` (a managed-Redis default) and a ``maxmemory`` below what
    Redis holds now: every write evicts keys with a TTL — artefacts, journals — never the epoch."""

    async def act(chaos: Chaos) -> None:
        info = dict(line.split(":", 1) for line in chaos.services.redis_cli("INFO", "memory").splitlines() if ":" in line)
        used, startup = int(info["used_memory"]), int(info["used_memory_startup"])
        limit = startup + max(256 * 1024, (used - startup) // 4)
        chaos.services.redis_cli("CONFIG", "SET", "maxmemory-policy", "volatile-lru")
        chaos.services.redis_cli("CONFIG", "SET", "maxmemory", str(limit))
        chaos.say(f"    maxmemory {limit:,} B (used {used:,} B), volatile-lru")

    return act


def redis_not_evicting() -> Fault:
    """The operator's fix: no limit, ``noeviction``; the worker started again if it had stopped."""

    async def act(chaos: Chaos) -> None:
        stats = dict(line.split(":", 1) for line in chaos.services.redis_cli("INFO", "stats").splitlines() if ":" in line)
        chaos.services.redis_cli("CONFIG", "SET", "maxmemory", "0")
        chaos.services.redis_cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
        chaos.say(f"    evicted keys so far: {stats.get('evicted_keys', '?').strip()}; policy back to noeviction")
        if not chaos.workers["A"].alive:
            await asyncio.to_thread(chaos.start_worker, "A")

    return act


def restart(name: str) -> Fault:
    """SIGTERM and start again (a deploy)."""

    async def act(chaos: Chaos) -> None:
        await asyncio.to_thread(chaos.workers[name].stop)
        await asyncio.to_thread(chaos.start_worker, name)

    return act


def replay_outage(seconds: float, requests: int) -> Fault:
    """The replay worker with ``requests`` requests pending while Redis is away ``seconds``: its
    log bytes and CPU over the window, then every request answered once Redis is back."""

    async def act(chaos: Chaos) -> None:
        worker = chaos.workers["R"]
        await asyncio.to_thread(chaos.start_worker, "R")
        replies = AIOKafkaConsumer(bootstrap_servers=chaos.services.bootstrap, group_id=None)
        await replies.start()
        try:
            parts = [TopicPartition(topics.REPLAY_REPLIES, p) for p in sorted(replies.partitions_for_topic(topics.REPLAY_REPLIES) or ())]
            if not parts:
                await replies._client.force_metadata_update()  # noqa: SLF001
                parts = [TopicPartition(topics.REPLAY_REPLIES, p) for p in sorted(replies.partitions_for_topic(topics.REPLAY_REPLIES) or ())]
            replies.assign(parts)
            await replies.seek_to_end(*parts)
            answered: set[str] = set()
            # a probe answered first: the worker's consumer has its position (a new group reads from the end)
            probe_deadline = time.monotonic() + 60
            while time.monotonic() < probe_deadline and not any(r.startswith("probe-") for r in answered):
                await chaos.replay_requests("probe", 1)
                answered |= await _replies(replies, 2.0)
            logs0, cpu0 = worker.log_bytes(), worker.cpu_total()
            t0 = time.monotonic()
            await asyncio.to_thread(chaos.services.redis_stop, "save")
            ids = await chaos.replay_requests("pending", requests)
            await asyncio.sleep(max(0.0, t0 + seconds - time.monotonic()))
            logs1, cpu1, t1 = worker.log_bytes(), worker.cpu_total(), time.monotonic()
            await asyncio.to_thread(chaos.services.up)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not ids <= answered:
                answered |= await _replies(replies, 1.0)
        finally:
            await replies.stop()
        span = t1 - t0
        chaos.measures += [
            Measure(f"replay worker log bytes during a {span:.0f}s Redis outage, {requests} requests pending", f"{logs1 - logs0:,}",
                    "< 10,240", logs1 - logs0 < 10_240),
            Measure("replay worker CPU during that outage", f"{100 * (cpu1 - cpu0) / span:.1f} % of a core", "< 5 %", (cpu1 - cpu0) / span < 0.05),
            Measure("replay requests answered after the outage", f"{len(ids & answered)} of {len(ids)}", "all", ids <= answered),
        ]

    return act


async def _replies(consumer: AIOKafkaConsumer, seconds: float) -> set[str]:
    batch = await consumer.getmany(timeout_ms=int(seconds * 1000), max_records=5000)
    return {m.key.decode() for records in batch.values() for m in records if m.key}


def cluster_scenarios() -> list[Scenario]:
    """What ``make chaos`` runs on a 3-broker cluster (``--kafka-brokers 3``)."""
    return [
        Scenario("cluster_baseline", 100, 8),
        Scenario("broker_kill", 200, 20, [(4, "SIGKILL broker 2 (restarted 8 s later)", broker_kill(2, 8)),
                                          (13, "SIGKILL broker 3 (restarted 5 s later)", broker_kill(3, 5))]),
    ]


def scenarios() -> list[Scenario]:
    return [
        Scenario("baseline", 100, 8),
        Scenario("sigkill", 300, 24, [(4, "SIGKILL worker A (restart 1 s later)", kill("A")),
                                      (11, "SIGKILL worker A mid-poll", kill("A", 0.2)),
                                      (18, "SIGKILL worker A", kill("A"))]),
        Scenario("rebalance", 200, 20, [(3, "start worker B (rebalance)", start("B")),
                                        (10, "SIGTERM worker A (hand-over)", stop("A")),
                                        (12, "start worker A again", start("A")),
                                        (17, "SIGTERM worker B", stop("B"))]),
        Scenario("redis_save", 150, 15, [(5, "Redis SHUTDOWN SAVE", redis_stop("save")), (8, "Redis up", redis_up())]),
        Scenario("redis_nosave", 150, 15, [(5, "Redis SHUTDOWN NOSAVE (AOF keeps the data)", redis_stop("nosave")), (8, "Redis up", redis_up())]),
        Scenario("redis_outage", 400, 45, [(5, "Redis down for 30 s (measured)", redis_outage(30))]),
        Scenario("broker_restart", 200, 10, [(4, "broker SIGTERM, restart (ingress paused)", broker_restart())]),
        Scenario("bad_binary", 40, 8),
        Scenario("bad_input", 60, 10),
        # before redis_lost: for RW_JOURNAL_TTL_S after a store loss the worker resumes only runs
        # whose journal is whole, which would hide a restored store's old journals
        *_scenarios(),
        Scenario("redis_lost", 200, 20, [(6, "Redis SHUTDOWN NOSAVE with its AOF/RDB deleted (store lost)", redis_stop("lose")),
                                         (8, "Redis up, empty", redis_up())]),
    ]


BUDGET = 65_536
"""Worker log bytes (every worker process) one ownership-and-store scenario may write: what its faults and
the per-record warnings of its fixtures need, with room — a retry loop writes megabytes."""


def _scenarios() -> list[Scenario]:
    """The operational events that threaten one number per event and one end per run: a paused
    worker, a burst, a zombie, partitions added, a restored or evicting store, a replay outage."""
    return [
        # 1. the worker's own delay taken for a silent producer
        # every run ends: producers vanish while the worker stands still for 2×STALL_S (it drops the
        # runs it holds, and must take up the open ones again from the store's index), and while
        # its clock jumps an hour forward (stream time credits at most one expiry interval)
        Scenario("stall_vanished", 120, 14, [(5, "SIGSTOP worker A for 6 s (2×STALL_S) while a third of the producers vanish, then SIGCONT",
                                              pause("A", 6))], timeout_s=6, vanish=0.34, linger_s=2, log_budget=BUDGET),
        Scenario("clock_jump_vanished", 120, 14, [(5, "worker A's clock (libfaketime) jumps +1 h while a third of the producers vanish",
                                                   clock_jump("A", "+1h"))], timeout_s=6, vanish=0.34, faketime=True, linger_s=2, log_budget=BUDGET),
        Scenario("paused_worker", 120, 18, [(5, "SIGSTOP worker A for 8 s (RW_INACTIVITY_TIMEOUT_S=4), then SIGCONT", pause("A", 8))],
                 timeout_s=4, linger_s=6, check_artefacts=True, log_budget=BUDGET),
        Scenario("burst_backlog", 3000, 3, timeout_s=1, concurrency=3000, arrival_s=1, linger_s=4, check_artefacts=True, log_budget=BUDGET),
        # 2. a thawed worker acting for runs that moved
        # (timeout 6 s: its expiry tick, every 1.5 s, then mostly comes before the heartbeat, every
        # 3 s, that makes the thawed worker rejoin — with 12 s the two tie and the row failed 2 in 4)
        Scenario("zombie_worker", 160, 44, [(1, "start worker B (both RW_INACTIVITY_TIMEOUT_S=6)", start("B")),
                                            (16, "SIGSTOP worker A for 25 s (B takes over its partitions), then SIGCONT", pause("A", 25))],
                 timeout_s=6, linger_s=8, check_artefacts=True, log_budget=BUDGET),
        # 4. a Redis restored from an older copy, and `appendonly no` followed by a restart
        Scenario("redis_restored", 150, 16, [(4, "copy Redis's AOF/RDB (the backup)", redis_snapshot()),
                                             (10, "Redis stopped, started from the copy of 6 s before", redis_restore())],
                 log_budget=BUDGET),
        Scenario("redis_aof_off", 150, 16, [(4, "CONFIG SET appendonly no", redis_config("appendonly", "no")),
                                            (10, "Redis SHUTDOWN and restart (loads the AOF of 6 s before)", redis_stop("save")),
                                            (10.5, "Redis up", redis_up())], log_budget=BUDGET),
        # ... and a restored Redis while its writer is frozen and another worker takes its partitions
        # over: whichever worker writes first after the restore must tell the store went back (in
        # the run of 2026-12-02 the other worker's own writes did; the path where the new owner
        # learns it only from the frozen one's commits is tests/integration/test_fence.py's)
        Scenario("redis_restored_takeover", 150, 30, [(1, "start worker B", start("B")),
                                                      (5, "copy Redis's AOF/RDB (the backup)", redis_snapshot()),
                                                      (11, "SIGSTOP worker A; Redis restored from the copy of 6 s before; B takes A's "
                                                           "partitions after the session timeout; SIGCONT A after 16 s", pause("A", 16, meanwhile=redis_restore()))],
                 timeout_s=30, linger_s=4, log_budget=BUDGET),
        # 5. an evicting Redis
        Scenario("redis_evicting", 200, 24, [(2, "Redis maxmemory-policy volatile-lru, maxmemory below its data", redis_evicting()),
                                             (9, "restart worker A (SIGTERM, start)", restart("A")),
                                             (20, "maxmemory 0, noeviction (the operator's fix); worker A started if it stopped",
                                              redis_not_evicting())],
                 check_artefacts=True, log_budget=BUDGET),
        # 6. the replay worker while Redis is away
        Scenario("replay_outage", 120, 20, [(1, "replay worker up; 40 requests pending while Redis is down 15 s (measured)",
                                             replay_outage(15, 40))], log_budget=BUDGET),
        # 3. raw partitions added mid-stream, producers switching (last of these: the raw topic keeps 12 partitions)
        Scenario("raw_partitions", 200, 24, [(1, "start worker B (both RW_INACTIVITY_TIMEOUT_S=8)", start("B")),
                                             (12, "raw 8 → 12 partitions, the load producer switched at once", raw_partitions(12)),
                                             (28, "rolling restart: worker A (its metadata now has 12 partitions)", restart("A")),
                                             (29, "rolling restart: worker B", restart("B"))],
                 timeout_s=8, linger_s=10, check_artefacts=True, log_budget=BUDGET),
    ]


# -- verification ---------------------------------------------------------------------------------


@dataclass
class Observed:
    events: dict[str, dict[int, list[bytes]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    dlq: dict[bytes | None, list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))
    """key → [(value size, reason)]."""
    dlq_headers: dict[bytes | None, list[set[str]]] = field(default_factory=lambda: defaultdict(list))
    """key → the header names of each of its dead letters (the originals are kept byte for byte)."""
    ended_ms: dict[str, int] = field(default_factory=dict)
    """run id → the record timestamp of its first terminal event (the producer's clock, ms)."""


async def collect(bootstrap: str) -> Observed:
    """Everything on reasoning.events.v1 and the DLQ, from the beginning to the current end."""
    seen = Observed()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, fetch_max_bytes=16 * 1024 * 1024,
                                max_partition_fetch_bytes=8 * 1024 * 1024)
    await consumer.start()
    try:
        parts = [TopicPartition(t, p) for t in (topics.EVENTS, topics.DLQ) for p in sorted(consumer.partitions_for_topic(t) or ())]
        if not parts:
            await consumer._client.force_metadata_update()  # noqa: SLF001
            parts = [TopicPartition(t, p) for t in (topics.EVENTS, topics.DLQ) for p in sorted(consumer.partitions_for_topic(t) or ())]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        remaining = {tp for tp in parts if ends[tp] > 0}
        while remaining:
            batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
            for tp, records in batch.items():
                for m in records:
                    headers = dict(m.headers)
                    if tp.topic == topics.EVENTS:
                        run_id = headers.get("rw-run-id", b"").decode("utf-8", "replace")
                        seen.events[run_id][int(headers["rw-event-seq"])].append(m.value)
                        if run_id not in seen.ended_ms and _is_terminal(m.value):
                            seen.ended_ms[run_id] = m.timestamp
                    else:
                        # labelled by the contract's code (rw-dlq-code) where the worker sets one, else its reason
                        label = headers.get("rw-dlq-code") or headers.get("rw-dlq-reason", b"")
                        seen.dlq[m.key].append((len(m.value or b""), label.decode("utf-8", "replace")))
                        seen.dlq_headers[m.key].append(set(headers))
                    if m.offset + 1 >= ends[tp]:
                        remaining.discard(tp)
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    return seen


@dataclass
class Row:
    scenario: str
    runs: int = 0
    complete: int = 0
    lost_runs: int = 0
    lost_events: int = 0
    duplicates: int = 0
    inconsistent: int = 0
    renumbered: int = 0
    """Runs with two different events under one ``rw-event-seq`` (a consumer de-duplicating by
    (run, seq) throws one of them away)."""
    ended_twice: int = 0
    """Runs with two different terminal events (``RUN_FINISHED`` / ``RUN_ERROR``)."""
    refused: int = 0
    """Runs whose journal vanished with the store: dead-lettered ``store_lost``, accounted for."""
    dlq: Counter[str] = field(default_factory=Counter)
    wedged: list[int] = field(default_factory=list)
    artefacts_missing: int | None = None
    """Finished runs with an artefact gone from Redis (scenarios that check it)."""
    usage: Usage | None = None
    log_budget: int | None = None

    @property
    def over_budget(self) -> bool:
        return self.log_budget is not None and self.usage is not None and self.usage.log_bytes > self.log_budget

    @property
    def verdict(self) -> str:
        ok = (self.lost_runs == 0 and self.inconsistent == 0 and self.renumbered == 0 and self.ended_twice == 0 and not self.wedged
              and not self.artefacts_missing and not self.over_budget)
        return "PASS" if ok else "FAIL"


def _reason(reason: str) -> str:
    """A DLQ reason without its particulars (line numbers, header values): a table label."""
    label = re.sub(r" at line \d+| \d+", "", reason.split(":", 1)[0].split(" (", 1)[0])
    return label[:48] or "?"


def check_run(run: Run, seen: Observed, row: Row) -> tuple[int, int, int, bool]:
    """(lost events, duplicate copies, inconsistent numbers, complete) of one run; counts the run
    in ``row.renumbered`` / ``row.ended_twice`` when it has two different events under one
    number / two different terminal events."""
    by_seq = seen.events.get(run.run_id, {})
    lost = duplicates = inconsistent = 0
    terminals: set[bytes] = set()
    renumbered = False
    for seq, copies in by_seq.items():
        distinct = {orjson.dumps(orjson.loads(c), option=orjson.OPT_SORT_KEYS) for c in copies}
        terminals |= {d for d in distinct if orjson.loads(d).get("type") in TERMINAL}
        duplicates += len(copies) - 1
        if len(distinct) > 1:
            renumbered = True
            inconsistent += 1
        elif seq < len(run.reference):
            if orjson.loads(copies[0]) != run.reference[seq]:
                inconsistent += 1
        else:
            inconsistent += 1  # a number past the reference's end: an event a correct worker never publishes
    for seq in range(len(run.reference)):
        if seq not in by_seq:
            lost += 1
    row.renumbered += renumbered
    row.ended_twice += len(terminals) > 1
    return lost, duplicates, inconsistent, lost == 0 and inconsistent == 0


_TERMINAL_BYTES = tuple(f'"{t}"'.encode() for t in TERMINAL)


def _is_terminal(event: bytes) -> bool:
    """Whether a published event (its JSON bytes) ends its run (a byte search: the collector
    meets every event of every scenario)."""
    return any(mark in event for mark in _TERMINAL_BYTES)


def _terminals(by_seq: dict[int, list[bytes]]) -> set[bytes]:
    """The distinct terminal events among a run's published events."""
    found = set()
    for copies in by_seq.values():
        for copy in copies:
            if _is_terminal(copy):
                found.add(orjson.dumps(orjson.loads(copy), option=orjson.OPT_SORT_KEYS))
    return found


def check_vanished(run: Run, seen: Observed, row: Row) -> bool:
    """A run whose producer vanished: its published events are the offline translation of what
    was sent, then the worker's own closing events ending as the translator's inactivity abort
    ends (``RUN_ERROR inactivity_timeout``, or ``RUN_FINISHED`` where the provider's stream had
    completed and only the end record never came) — once each number, one terminal event.
    Counts the run in ``row.renumbered`` / ``row.ended_twice``."""
    by_seq = seen.events.get(run.run_id, {})
    renumbered = any(len({orjson.dumps(orjson.loads(c), option=orjson.OPT_SORT_KEYS) for c in copies}) > 1 for copies in by_seq.values())
    terminals = _terminals(by_seq)
    row.renumbered += renumbered
    row.ended_twice += len(terminals) > 1
    prefix = all(seq in by_seq and orjson.loads(by_seq[seq][0]) == event for seq, event in enumerate(run.reference))
    ended = len(terminals) == 1 and _same_end(orjson.loads(next(iter(terminals))), run.end)
    return prefix and ended and not renumbered


def _same_end(published: dict[str, Any], expected: dict[str, Any] | None) -> bool:
    """The same terminal event type, and for an error the same code (its message names the
    worker's timeout, which the offline reference does not know)."""
    return expected is not None and published.get("type") == expected.get("type") and published.get("code") == expected.get("code")


def verify(chaos: Chaos, seen: Observed, diagnostics: list[str]) -> list[Row]:
    rows: dict[str, Row] = {}
    for run in chaos.runs:
        if run.expect == "vanished":
            name = f"{run.scenario} (vanished producers)"
            row = rows.setdefault(name, Row(name))
            row.runs += 1
            if check_vanished(run, seen, row):
                row.complete += 1
            else:
                row.lost_runs += 1
                diagnostics.append(_diagnose(run, seen))
            continue
        if run.expect != "complete":
            continue
        row = rows.setdefault(run.scenario, Row(run.scenario, wedged=chaos.wedged.get(run.scenario, []),
                                                artefacts_missing=chaos.artefacts_missing.get(run.scenario),
                                                usage=chaos.usage.get(run.scenario), log_budget=chaos.budgets.get(run.scenario)))
        row.runs += 1
        reasons = [_reason(r) for _, r in seen.dlq.get(run.run_id.encode(), [])]
        row.dlq.update(reasons)
        lost, dup, bad, complete = check_run(run, seen, row)
        row.duplicates += dup
        row.inconsistent += bad
        if complete:
            row.complete += 1
        elif "store_lost" in reasons and bad == 0:
            row.refused += 1
        else:
            row.lost_runs += 1 if lost else 0
            row.lost_events += lost
        if not complete:
            diagnostics.append(_diagnose(run, seen))
    return list(rows.values())


def _diagnose(run: Run, seen: Observed) -> str:
    """One line per run that is not complete: what was published against the reference."""
    by_seq = seen.events.get(run.run_id, {})
    missing = [s for s in range(len(run.reference)) if s not in by_seq]
    differ = []
    for seq, copies in sorted(by_seq.items()):
        kinds = sorted({orjson.loads(c).get("type", "?") for c in copies})
        ref = run.reference[seq]["type"] if seq < len(run.reference) else "-"
        if len({orjson.dumps(orjson.loads(c), option=orjson.OPT_SORT_KEYS) for c in copies}) > 1 or (
            seq >= len(run.reference) or orjson.loads(copies[0]) != run.reference[seq]
        ):
            differ.append(f"{seq}:{'/'.join(kinds)}(ref {ref}, {len(copies)} copies)")
    reasons = Counter(_reason(r) for _, r in seen.dlq.get(run.run_id.encode(), []))
    return (f"{run.run_id}: reference {len(run.reference)} events, published seqs {len(by_seq)}; missing {missing[:12]}; "
            f"differ {differ[:8]}; DLQ {dict(reasons)}")


def verify_bad(case: BadCase, seen: Observed) -> tuple[str, str]:
    """(verdict, what was observed) of one bad-input row."""
    run = case.run
    by_seq = seen.events.get(run.run_id, {})
    dlq_keys = {k for k in case.dlq_keys if k in seen.dlq}
    keys = case.dlq_keys | {run.run_id.encode()}
    reasons = sorted({_reason(r) for k in keys for _, r in seen.dlq.get(k, [])})
    last = None
    if by_seq:
        last = orjson.loads(by_seq[max(by_seq)][0]).get("type")
    distinct_bad = sum(1 for copies in by_seq.values() if len({orjson.dumps(orjson.loads(c), option=orjson.OPT_SORT_KEYS) for c in copies}) > 1)
    observed = f"{len(by_seq)} events, last {last or '-'}; required DLQ {len(dlq_keys)}/{len(case.dlq_keys)}; DLQ reasons: {', '.join(reasons) or '-'}"
    ok = distinct_bad == 0 and dlq_keys == case.dlq_keys
    if case.no_events and by_seq:
        ok = False
    if case.terminal_not and last == case.terminal_not:
        ok = False
    if case.consistent:
        stream = [orjson.loads(by_seq[s][0]) for s in sorted(by_seq)]
        complete = stream == run.reference
        if case.name.startswith("binary header value"):
            # the binary record itself dead-lettered (its x-trace header kept), the run not ending RUN_FINISHED
            accounted = any("x-trace" in names for names in seen.dlq_headers.get(run.run_id.encode(), []))
            ok = ok and (complete or (accounted and last != "RUN_FINISHED"))
        else:
            ok = ok and complete
        observed += "; stream = reference" if complete else "; stream != reference"
    return ("PASS" if ok else "FAIL"), observed


def scan_logs(chaos: Chaos) -> tuple[int, int]:
    """(opaque values found in any worker log, values checked): full values and 16-byte chunks.

    One pass over the logs with every 16-byte chunk in a dict (a worker that floods its log —
    a replay worker retrying at once wrote 15 MB in a 15 s outage — made a search per chunk
    take many minutes); values shorter than 16 bytes are searched for whole."""
    text = b"".join(p.read_bytes() for w in chaos.workers.values() for p in w.logs if p.exists())
    owner: dict[bytes, int] = {}
    short: list[tuple[bytes, int]] = []
    checked = 0
    for run in chaos.runs + [c.run for c in chaos.bad]:
        for secret in run.secrets:
            raw = secret.encode()
            if len(raw) >= 16:
                for i in range(0, max(1, len(raw) - 15), 16):
                    owner.setdefault(raw[i : i + 16], checked)
            else:
                short.append((raw, checked))
            checked += 1
    found = {n for raw, n in short if raw in text}
    if owner:
        found |= {owner[c] for c in (text[i : i + 16] for i in range(len(text) - 15)) if c in owner}
    return len(found), checked


def machine() -> str:
    cpus = len([line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("processor")])
    mem = int(Path("/proc/meminfo").read_text().split()[1]) // (1024 * 1024)
    return f"{platform.system()} {platform.release()}, {cpus} cores, {mem} GiB, Python {platform.python_version()}"
