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
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import MessageSizeTooLargeError

from chaos.load import BadCase, Run, bad_cases, make_run, templates
from chaos.services import Services, Worker
from reasonwire.contracts import topics

Fault = Callable[["Chaos"], Awaitable[None]]


@dataclass
class Scenario:
    name: str
    runs: int
    seconds: float
    faults: list[tuple[float, str, Fault]] = field(default_factory=list)
    """(seconds after the load starts, description, action)."""
    notes: list[str] = field(default_factory=list)


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
            name: Worker(name, services, self.group, out, health_port=services.redis_port + 3 + i, tree=tree or Path(__file__).resolve().parents[1])
            for i, name in enumerate(("A", "B"))
        }
        self.runs: list[Run] = []
        self.bad: list[BadCase] = []
        self.measures: list[Measure] = []
        self.unsent = 0
        """Raw records the load producer could not publish (their runs then look lost: not the worker's fault)."""
        self.wedged: dict[str, list[int]] = {}
        """Scenario → raw partitions still uncommitted 60 s after its load ended."""
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

    async def produce(self, runs: list[Run], seconds: float) -> None:
        """Interleave the runs' records (each run in order) evenly over ``seconds``."""
        assert self.producer is not None
        queues = [list(r.records) for r in runs]
        total = sum(len(q) for q in queues)
        if not total:
            return
        start, sent, active, cursor = time.monotonic(), 0, [], 0
        acks: list[asyncio.Future[Any]] = []
        pending = sorted(range(len(queues)), key=lambda i: i)
        while sent < total:
            while len(active) < 40 and pending:
                active.append(pending.pop(0))
            i = active[cursor % len(active)]
            record = queues[i].pop(0)
            if not queues[i]:
                active.remove(i)
            else:
                cursor += 1
            await self.paused.wait()
            if len(record.value or b"") > 512 * 1024:  # alone in its batch, as the probe measured it
                await self.producer.flush()
            acks.append(await self.producer.send(topics.RAW, record.value, key=record.key, headers=record.headers))
            sent += 1
            ahead = start + seconds * sent / total - time.monotonic()
            if ahead > 0.005:
                await asyncio.sleep(ahead)
        await self.producer.flush()
        failed = [r for r in await asyncio.gather(*acks, return_exceptions=True) if isinstance(r, BaseException)]
        self.unsent += len(failed)  # the load's own losses: not the worker's
        if failed:
            self.say(f"  the load producer failed to publish {len(failed)} records ({type(failed[0]).__name__})")

    async def huge_value_size(self) -> int:
        """The largest value the broker takes on a raw-topic-like topic with a run's headers: its
        dead letter (the same bytes plus a reason header) then does not fit the DLQ."""
        assert self.producer is not None
        headers = make_run(templates()[0], "probe", 0).records[0].headers
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
        port = self.workers[name].health_port
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=6) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except Exception:
            return 0

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

    async def run_scenario(self, scenario: Scenario, extra: list[Run] | None = None) -> None:
        base = templates()
        runs = [make_run(base[i % len(base)], scenario.name, i) for i in range(max(1, int(scenario.runs * self.scale)))]
        self.rng.shuffle(runs)
        runs += extra or []
        self.runs += runs
        self.say(f"scenario {scenario.name}: {len(runs)} runs, {sum(len(r.records) for r in runs)} records over {scenario.seconds:.0f}s")
        load = asyncio.create_task(self.produce(runs, scenario.seconds))
        start = time.monotonic()
        for at, description, action in scenario.faults:
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            self.say(f"  fault at {time.monotonic() - start:5.1f}s: {description}")
            await action(self)
        await load
        lag = await self.settle(60)
        self.wedged[scenario.name] = sorted(p for p, n in lag.items() if n)
        self.say(f"  settled: lag {sum(lag.values()) if lag else '?'}")


# -- faults -----------------------------------------------------------------------------------------


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
        await asyncio.to_thread(chaos.services.up)
        back = time.monotonic()
        after, waited = 0, 0.0
        while time.monotonic() - back < 30:
            after = await asyncio.to_thread(chaos.readyz, "A")
            if after == 200:
                break
            await asyncio.sleep(0.2)
        waited = time.monotonic() - back
        span = t1 - t0
        chaos.measures += [
            Measure(f"worker log bytes during a {span:.0f}s Redis outage under load", f"{logs1 - logs0:,}", "< 10,240", logs1 - logs0 < 10_240),
            Measure("worker CPU during the outage", f"{100 * (cpu1 - cpu0) / span:.1f} % of a core", "< 5 %", (cpu1 - cpu0) / span < 0.05),
            Measure("/readyz while Redis is down", str(during), "503", during == 503),
            Measure("/readyz after Redis is back", f"{after} after {waited:.1f}s", "200 within one backoff step (5 s) + probe",
                    after == 200 and waited <= 7.0),
        ]

    return act


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
    """SIGKILL one broker of a replicated cluster mid-stream (issue 16): producers with
    ``acks=all`` and idempotence, RF 3 and ``min.insync.replicas`` 2 lose nothing; the worker carries on."""

    async def act(chaos: Chaos) -> None:
        await asyncio.to_thread(chaos.services.broker, "kill-kafka", node)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(chaos.services.broker, "start-kafka", node)

    return act


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
        Scenario("redis_lost", 200, 20, [(6, "Redis SHUTDOWN NOSAVE with its AOF/RDB deleted (store lost)", redis_stop("lose")),
                                         (8, "Redis up, empty", redis_up())]),
    ]


# -- verification ---------------------------------------------------------------------------------


@dataclass
class Observed:
    events: dict[str, dict[int, list[bytes]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    dlq: dict[bytes | None, list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))
    """key → [(value size, reason)]."""
    dlq_headers: dict[bytes | None, list[set[str]]] = field(default_factory=lambda: defaultdict(list))
    """key → the header names of each of its dead letters (the originals are kept byte for byte)."""


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
    refused: int = 0
    """Runs whose journal vanished with the store: dead-lettered ``store_lost``, accounted for."""
    dlq: Counter[str] = field(default_factory=Counter)
    wedged: list[int] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "PASS" if self.lost_runs == 0 and self.inconsistent == 0 and not self.wedged else "FAIL"


def _reason(reason: str) -> str:
    """A DLQ reason without its particulars (line numbers, header values): a table label."""
    label = re.sub(r" at line \d+| \d+", "", reason.split(":", 1)[0].split(" (", 1)[0])
    return label[:48] or "?"


def check_run(run: Run, seen: Observed, row: Row) -> tuple[int, int, int, bool]:
    """(lost events, duplicate copies, inconsistent numbers, complete) of one run."""
    by_seq = seen.events.get(run.run_id, {})
    lost = duplicates = inconsistent = 0
    for seq, copies in by_seq.items():
        distinct = {orjson.dumps(orjson.loads(c), option=orjson.OPT_SORT_KEYS) for c in copies}
        duplicates += len(copies) - 1
        if len(distinct) > 1:
            inconsistent += 1
        elif seq < len(run.reference):
            if orjson.loads(copies[0]) != run.reference[seq]:
                inconsistent += 1
        else:
            inconsistent += 1  # a number past the reference's end: an event a correct worker never publishes
    for seq in range(len(run.reference)):
        if seq not in by_seq:
            lost += 1
    return lost, duplicates, inconsistent, lost == 0 and inconsistent == 0


def verify(chaos: Chaos, seen: Observed, diagnostics: list[str]) -> list[Row]:
    rows: dict[str, Row] = {}
    for run in chaos.runs:
        if run.expect != "complete":
            continue
        row = rows.setdefault(run.scenario, Row(run.scenario, wedged=chaos.wedged.get(run.scenario, [])))
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
    """(opaque values found in any worker log, values checked): full values and 16-byte chunks."""
    text = b"".join(p.read_bytes() for w in chaos.workers.values() for p in w.logs if p.exists())
    found = checked = 0
    for run in chaos.runs + [c.run for c in chaos.bad]:
        for secret in run.secrets:
            checked += 1
            raw = secret.encode()
            chunks = [raw[i : i + 16] for i in range(0, max(1, len(raw) - 15), 16)] if len(raw) >= 16 else [raw]
            if any(chunk in text for chunk in chunks):
                found += 1
    return found, checked


def machine() -> str:
    cpus = len([line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("processor")])
    mem = int(Path("/proc/meminfo").read_text().split()[1]) // (1024 * 1024)
    return f"{platform.system()} {platform.release()}, {cpus} cores, {mem} GiB, Python {platform.python_version()}"
