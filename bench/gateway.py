"""The gateway under 200 concurrent SSE clients: memory and added latency.

Theory of operation
-------------------
Real processes on the real broker and Redis: a normalizer worker
(``reasonwire worker normalize``) and one gateway process (``reasonwire gateway``).
The harness opens ``clients`` SSE streams (``GET …/events``, public audience)
spread over ``runs`` runs *before* the runs start, then publishes every run
through the ingress client at a provider-like pace (``pace_ms`` between events),
stamping the send time of every raw record.

* **Latency** (raw publish → SSE delivery): per delivered event, arrival at the
  client minus the send time of the raw record that produced it (the sans-I/O
  translator + the public audience filter, run offline on the same capture, say
  which raw record produced which public event). The same events read straight
  from ``reasoning.events.public.v1`` by a plain consumer in the harness give the
  baseline without the gateway; the gateway's **added** latency is paired per
  event: its arrival at each SSE client minus its arrival at that direct reader
  (both stamped by the harness's clock). Harness, worker, gateway and broker share the
  machine, so the figures include their competition for the CPU.
* **Memory**: the gateway's RSS after start-up (idle), and its peak while all
  clients are connected; per client = (peak − idle) / clients (that includes the
  run logs the readers hold).
* **Fan-out**: the gateway's partition readers (Kafka consumers) at the end vs the
  number of clients — one reader per partition touched, never one per client.

``python -m bench.gateway [--clients N] [--runs R]`` runs it alone and writes
``bench/results/gateway.json``; ``make bench`` runs it as its last section.

Slow readers
------------
``python -m bench.gateway --slow-readers N [--run-mb M]`` measures instead what readers that
stop reading cost: one finished run of ``M`` MB of events (put on the internal topic directly,
no worker), read once (the baseline holds the run's log), then ``N`` readers with a 4 KiB
receive buffer that read nothing for a while: the gateway's RSS before, at its peak while they
stall, and after they read to the end and leave; every reader must get the whole run with a
clean end. Written to ``bench/results/gateway-slow.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.e2e import process_cpu_s
from reasonwire.contracts import topics
from reasonwire.contracts.policy import Audience, RetentionPolicy
from reasonwire.workers.core.audience import AudienceFilter
from reasonwire.workers.services.gateway.keys import hash_key
from reasonwire.workers.services.ingress.publisher import Publisher
from reasonwire.workers.translators import translator_for

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "tests" / "fixtures" / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"
KEY = "bench-key"


def _event_sources(lines: list[str], run_id: str, thread_id: str) -> list[int]:
    """Public event seq → index of the raw record that produced it (len(lines) = the end record)."""
    translator = translator_for("anthropic-messages", run_id=run_id, thread_id=thread_id, model="claude-opus-4-5")
    audience = AudienceFilter(RetentionPolicy().rule(Audience.PUBLIC))
    out: list[int] = []
    for i, line in enumerate(lines):
        out += [i for e in translator.feed(line.encode()).events if audience.admit(e) is not None]
    out += [len(lines) for e in translator.finish().events if audience.admit(e) is not None]
    return out


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None, "n": 0}
    s = sorted(values)
    return {
        "p50_ms": round(s[len(s) // 2] * 1000, 2),
        "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))] * 1000, 2),
        "max_ms": round(s[-1] * 1000, 2),
        "n": len(s),
    }


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "reasonwire.workers.cli", *args], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


async def _wait_for(check: Any, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"bench.gateway: {what} did not come up")
        await asyncio.sleep(0.2)


async def measure(bootstrap: str, redis_url: str, *, clients: int = 200, runs: int = 20, pace_ms: float = 20.0, logs: Path) -> dict[str, Any]:
    logs.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "REDIS_URL": redis_url,
        "RW_GATEWAY_KEYS": json.dumps({"keys": [{"sha256": hash_key(KEY), "tenant": "bench", "audiences": ["public"]}]}),
        "RW_GATEWAY_FIRST_EVENT_TIMEOUT_S": "120",
        "RW_GATEWAY_LOOKBACK_S": "60",
        "RW_GROUP_ID": f"rw-bench-gw-{uuid.uuid4().hex[:6]}",
        "RW_HEALTH_PORT": "0",  # a taken probe port stops a worker; the bench reads none
    }
    worker_log, gateway_log = logs / "gateway-bench-worker.log", logs / "gateway-bench-gateway.log"
    worker = _spawn(["worker", "normalize"], env, worker_log)
    gateway = _spawn(["gateway", "--port", str(port)], env, gateway_log)
    try:
        await _wait_for(lambda: b"assigned to partitions" in worker_log.read_bytes(), "the normalizer worker")
        await _wait_for(lambda: _healthy(url), "the gateway")
        return await _drive(bootstrap, url, gateway.pid, clients=clients, runs=runs, pace_ms=pace_ms)
    finally:
        for proc in (gateway, worker):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


async def _drive(bootstrap: str, url: str, gateway_pid: int, *, clients: int, runs: int, pace_ms: float) -> dict[str, Any]:
    port = int(url.rsplit(":", 1)[1])
    lines = CAPTURE.read_text().splitlines()
    tag = uuid.uuid4().hex[:6]
    run_ids = [(f"bench-gw-{tag}-{i}", f"bench-thread-{tag}-{i}") for i in range(runs)]
    sources = {run_id: _event_sources(lines, run_id, thread_id) for run_id, thread_id in run_ids}
    sent: dict[str, list[float]] = {run_id: [0.0] * (len(lines) + 1) for run_id, _ in run_ids}
    arrivals: list[list[tuple[str, int, float]]] = [[] for _ in range(clients)]
    baseline: list[tuple[str, int, float]] = []
    rss_idle = _rss_mb(gateway_pid)
    cpu_before, harness_before = process_cpu_s(gateway_pid), time.process_time()
    peak = {"rss": rss_idle}

    limits = httpx.Limits(max_connections=clients + 10, max_keepalive_connections=clients + 10)
    async with httpx.AsyncClient(timeout=httpx.Timeout(180, connect=30), limits=limits) as http:

        async def client(n: int) -> None:
            """A minimal SSE client (HTTP/1.0 over a raw socket: the body streams until close) so the
            harness's own parsing cost does not dominate what is measured; stamps each frame."""
            run_id, thread_id = run_ids[n % runs]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            path = f"/v1/threads/{thread_id}/runs/{run_id}/events"
            writer.write(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode())
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith((b"HTTP/1.0 200", b"HTTP/1.1 200")):
                raise RuntimeError(f"bench.gateway: {head.splitlines()[0].decode()}")
            buffer = b""
            while chunk := await reader.read(65536):
                now = time.perf_counter()
                buffer += chunk
                *frames, buffer = buffer.split(b"\n\n")
                for frame in frames:
                    if frame.startswith(b"id: "):
                        arrivals[n].append((run_id, int(frame[4 : frame.index(b"\n")]), now))
            writer.close()

        async def direct() -> None:
            consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, fetch_max_wait_ms=50)
            await consumer.start()
            try:
                await consumer._client.force_metadata_update()  # noqa: SLF001
                parts = [TopicPartition(topics.EVENTS_PUBLIC, p) for p in consumer.partitions_for_topic(topics.EVENTS_PUBLIC) or ()]
                consumer.assign(parts)
                await consumer.seek_to_end(*parts)
                for tp in parts:
                    await consumer.position(tp)
                ended = 0
                wanted = {r for r, _ in run_ids}
                while ended < runs:
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        now = time.perf_counter()
                        for m in records:
                            headers = dict(m.headers)
                            run_id = headers.get("rw-run-id", b"").decode()
                            if run_id in wanted:
                                baseline.append((run_id, int(headers["rw-event-seq"]), now))
                                if orjson.loads(m.value)["type"] in ("RUN_FINISHED", "RUN_ERROR"):
                                    ended += 1
            finally:
                await consumer.stop()

        async def watch_memory() -> None:
            while True:
                peak["rss"] = max(peak["rss"], _rss_mb(gateway_pid))
                await asyncio.sleep(0.2)

        readers = [asyncio.create_task(client(n)) for n in range(clients)]
        baseline_task = asyncio.create_task(direct())
        memory_task = asyncio.create_task(watch_memory())
        await asyncio.sleep(3)  # every client connected and waiting for its run to start
        async with Publisher(bootstrap) as publisher:

            async def publish(run_id: str, thread_id: str) -> None:
                async with publisher.run(provider="anthropic-messages", run_id=run_id, thread_id=thread_id, tenant="bench", model="claude-opus-4-5") as run:
                    for i, line in enumerate(lines):
                        sent[run_id][i] = time.perf_counter()
                        await run.send(line)
                        await asyncio.sleep(pace_ms / 1000)
                    sent[run_id][len(lines)] = time.perf_counter()

            started = time.perf_counter()
            await asyncio.gather(*(publish(r, t) for r, t in run_ids))
            published_s = time.perf_counter() - started
        await asyncio.wait_for(asyncio.gather(*readers), 180)
        await asyncio.wait_for(baseline_task, 60)
        memory_task.cancel()
        health = (await http.get(url + "/healthz")).json()
    gateway_cpu, harness_cpu = process_cpu_s(gateway_pid) - cpu_before, time.process_time() - harness_before

    def latencies(seen: list[tuple[str, int, float]]) -> list[float]:
        return [at - sent[run_id][sources[run_id][seq]] for run_id, seq, at in seen if 0 <= seq < len(sources[run_id])]

    via_gateway = [x for per_client in arrivals for x in latencies(per_client)]
    direct_lat = latencies(baseline)
    g, d = _percentiles(via_gateway), _percentiles(direct_lat)
    # paired: the same event's arrival at an SSE client minus its arrival at the direct reader
    first_seen = {(run_id, seq): at for run_id, seq, at in baseline}
    paired = _percentiles([at - first_seen[(r, seq)] for c in arrivals for r, seq, at in c if (r, seq) in first_seen])
    expected_events = sum(len(sources[r]) for r in (run_ids[n % runs][0] for n in range(clients)))
    return {
        "clients": clients,
        "runs": runs,
        "events_per_run": len(sources[run_ids[0][0]]),
        "pace_ms": pace_ms,
        "publish_s": round(published_s, 2),
        "events_delivered": len(via_gateway),
        "events_expected": expected_events,
        "raw_to_sse": g,
        "raw_to_topic_direct": d,
        "added_by_gateway_ms": {"p50": paired["p50_ms"], "p99": paired["p99_ms"], "paired_events": paired["n"]},
        "gateway_rss_idle_mb": round(rss_idle, 1),
        "gateway_rss_peak_mb": round(peak["rss"], 1),
        "gateway_rss_per_client_kb": round((peak["rss"] - rss_idle) * 1024 / clients, 1),
        "gateway_cpu_s": round(gateway_cpu, 2),
        "gateway_cpu_us_per_delivered_event": round(gateway_cpu * 1e6 / max(1, len(via_gateway)), 1),
        "harness_cpu_s": round(harness_cpu, 2),
        "load_average_1m": os.getloadavg()[0],
        "partition_readers": health["readers"],
        "clients_served": health["served"],
    }


async def measure_slow(bootstrap: str, redis_url: str, *, readers: int, run_mb: float, stall_s: float = 5.0, logs: Path) -> dict[str, Any]:
    """``readers`` stalled readers of one finished run of ``run_mb`` MB (see the module doc)."""
    logs.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "REDIS_URL": redis_url,
        "RW_GATEWAY_KEYS": json.dumps({"keys": [{"sha256": hash_key(KEY), "tenant": "bench", "audiences": ["public", "internal"]}]}),
        "RW_GATEWAY_LOOKBACK_S": "600",
    }
    gateway = _spawn(["gateway", "--port", str(port)], env, logs / "gateway-slow-bench.log")
    try:
        await _wait_for(lambda: _healthy(url), "the gateway")
        return await _drive_slow(bootstrap, url, port, gateway.pid, readers=readers, run_mb=run_mb, stall_s=stall_s)
    finally:
        gateway.send_signal(signal.SIGTERM)
        try:
            gateway.wait(20)
        except subprocess.TimeoutExpired:
            gateway.kill()


async def _drive_slow(bootstrap: str, url: str, port: int, pid: int, *, readers: int, run_mb: float, stall_s: float) -> dict[str, Any]:
    from aiokafka import AIOKafkaProducer

    tag = uuid.uuid4().hex[:6]
    run_id, thread_id = f"bench-slow-{tag}", f"bench-slow-thread-{tag}"
    n = max(1, int(run_mb * 1024 * 1024 / 1000))
    events = [{"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id}]
    events += [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "x" * 960} for _ in range(n)]
    events.append({"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id})
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_batch_size=1 << 20, linger_ms=5)
    await producer.start()
    try:
        futures = []
        for seq, event in enumerate(events):
            headers = [("rw-run-id", run_id.encode()), ("rw-thread-id", thread_id.encode()), ("rw-tenant", b"bench"), ("rw-event-seq", str(seq).encode())]
            futures.append(await producer.send(topics.EVENTS, orjson.dumps(event), key=run_id.encode(), headers=headers))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    request = f"GET /v1/threads/{thread_id}/runs/{run_id}/events?audience=internal HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode()

    def connect() -> socket.socket:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.sendall(request)
        return sock

    def drain(sock: socket.socket) -> tuple[int, bool]:
        sock.settimeout(120)
        data = bytearray()
        while chunk := sock.recv(1 << 20):
            data += chunk
        sock.close()
        return data.count(b"\nid: "), data.endswith(b"\r\n0\r\n\r\n")

    baseline = await asyncio.to_thread(lambda: drain(connect()))
    await asyncio.sleep(1)
    rss_before = _rss_mb(pid)
    socks = [connect() for _ in range(readers)]
    peak = rss_before
    deadline = time.monotonic() + stall_s
    while time.monotonic() < deadline:
        peak = max(peak, _rss_mb(pid))
        await asyncio.sleep(0.2)
    clients = httpx.get(url + "/healthz", timeout=10).json()["clients"]
    started = time.perf_counter()
    results = await asyncio.gather(*(asyncio.to_thread(drain, s) for s in socks))
    drained_s = time.perf_counter() - started
    await asyncio.sleep(2)
    return {
        "slow_readers": readers,
        "run_mb": round(sum(len(orjson.dumps(e)) for e in events) / 1024 / 1024, 1),
        "events": len(events),
        "stall_s": stall_s,
        "baseline_reader": {"events": baseline[0], "clean_end": baseline[1]},
        "clients_counted_while_stalled": clients,
        "gateway_rss_before_mb": round(rss_before, 1),
        "gateway_rss_peak_while_stalled_mb": round(peak, 1),
        "gateway_rss_per_stalled_reader_kb": round((peak - rss_before) * 1024 / readers, 1),
        "gateway_rss_after_mb": round(_rss_mb(pid), 1),
        "readers_complete_and_clean": sum(1 for got, clean in results if got == len(events) and clean),
        "drain_all_s": round(drained_s, 2),
    }


def render_slow(r: dict[str, Any]) -> str:
    return (
        f"\n## gateway: {r['slow_readers']} stalled readers of one finished {r['run_mb']} MB run\n\n"
        "| figure | value |\n|---|---|\n"
        f"| gateway RSS before / peak while stalled ({r['stall_s']} s) / after they left | {r['gateway_rss_before_mb']} / {r['gateway_rss_peak_while_stalled_mb']} / {r['gateway_rss_after_mb']} MB |\n"
        f"| per stalled reader | {r['gateway_rss_per_stalled_reader_kb']} KB |\n"
        f"| readers counted by /healthz while stalled | {r['clients_counted_while_stalled']} |\n"
        f"| readers that got all {r['events']} events and a clean end | {r['readers_complete_and_clean']} / {r['slow_readers']} |\n"
        f"| time for all of them to read the run once they read | {r['drain_all_s']} s |\n"
    )


def render(r: dict[str, Any]) -> str:
    if "skipped" in r:
        return f"\n## gateway\n\nskipped: {r['skipped']}\n"
    g, d, a = r["raw_to_sse"], r["raw_to_topic_direct"], r["added_by_gateway_ms"]
    return (
        f"\n## gateway: {r['clients']} concurrent SSE clients on {r['runs']} runs\n\n"
        "| figure | value |\n|---|---|\n"
        f"| raw publish → SSE delivery p50 / p99 | {g['p50_ms']} / {g['p99_ms']} ms |\n"
        f"| raw publish → public topic (no gateway) p50 / p99 | {d['p50_ms']} / {d['p99_ms']} ms |\n"
        f"| added by the gateway (paired per event) p50 / p99 | {a['p50']} / {a['p99']} ms |\n"
        f"| events delivered / expected | {r['events_delivered']} / {r['events_expected']} |\n"
        f"| gateway RSS idle / peak / per client | {r['gateway_rss_idle_mb']} MB / {r['gateway_rss_peak_mb']} MB / {r['gateway_rss_per_client_kb']} KB |\n"
        f"| gateway CPU / per delivered event; harness CPU | {r['gateway_cpu_s']} s / {r['gateway_cpu_us_per_delivered_event']} µs; {r['harness_cpu_s']} s |\n"
        f"| load average (1 min) at the end, 2-core shared machine | {r['load_average_1m']} |\n"
        f"| Kafka consumers in the gateway (partition readers) for {r['clients']} clients | {r['partition_readers']} |\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--pace-ms", type=float, default=20.0)
    parser.add_argument("--slow-readers", type=int, default=0, help="measure N stalled readers of one finished run instead")
    parser.add_argument("--run-mb", type=float, default=8.0, help="the size of that run")
    args = parser.parse_args()
    results = ROOT / "bench" / "results"
    if args.slow_readers:
        slow = asyncio.run(
            measure_slow(os.environ["KAFKA_BOOTSTRAP_SERVERS"], os.environ["REDIS_URL"], readers=args.slow_readers, run_mb=args.run_mb, logs=results / "logs")
        )
        (results / "gateway-slow.json").write_text(json.dumps(slow, indent=2))
        print(render_slow(slow))
        return 0
    r = asyncio.run(
        measure(os.environ["KAFKA_BOOTSTRAP_SERVERS"], os.environ["REDIS_URL"], clients=args.clients, runs=args.runs, pace_ms=args.pace_ms, logs=results / "logs")
    )
    (results / "gateway.json").write_text(json.dumps(r, indent=2))
    print(render(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
