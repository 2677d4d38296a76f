"""The gateway under real clients: slow readers, many stalled readers, odd ids, the wrong
input, an event too large, another tenant's run, a browser on another origin.

Real ``reasonwire gateway`` processes on the real broker and Redis (no mocks); events are put
on the audience topics directly where the normalizer adds nothing to what is tested (a run of
thousands of padded events, two tenants' runs of one id), through the worker where the id must
round-trip end to end. The broker outage is in ``test_gateway_outage.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from reasonwire.contracts import topics
from reasonwire.contracts.ids import BadId
from reasonwire.workers.services.ingress.publisher import NotThisGrammar, Publisher
from tests.integration.conftest import ROOT
from tests.integration.gateway_support import GatewayProcess, auth, read_sse

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ANTHROPIC = FIXTURES / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"
OPENAI = FIXTURES / "openai-responses" / "c_interleaved_reasoning_tool_calls.jsonl"


def _ids(tag: str) -> tuple[str, str]:
    return f"{tag}-{uuid.uuid4().hex[:8]}", f"thread-{uuid.uuid4().hex[:8]}"


def _events_url(gw: GatewayProcess, thread_id: str, run_id: str, audience: str = "internal") -> str:
    return f"{gw.url}/v1/threads/{thread_id}/runs/{run_id}/events?audience={audience}"


def _padded_run(run_id: str, thread_id: str, n: int, pad: int) -> list[dict[str, Any]]:
    """RUN_STARTED, ``n`` text deltas of ``pad`` characters, RUN_FINISHED."""
    events: list[dict[str, Any]] = [{"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id}]
    events += [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": f"{i:06d}" + "x" * pad} for i in range(n)]
    events.append({"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id})
    return events


async def _put_events(bootstrap: str, run_id: str, thread_id: str, events: list[dict[str, Any]], *, first_seq: int = 0, tenant: str = "acme", topic: str = topics.EVENTS) -> None:
    """Normalized event records as the worker writes them (key = run id, rw-* headers)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_batch_size=1 << 20, linger_ms=5)
    await producer.start()
    try:
        pending = []
        for i, event in enumerate(events):
            headers = [("rw-run-id", run_id.encode()), ("rw-thread-id", thread_id.encode()), ("rw-tenant", tenant.encode()), ("rw-event-seq", str(first_seq + i).encode())]
            pending.append(await producer.send(topic, orjson.dumps(event), key=run_id.encode(), headers=headers))
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


async def _raw_end(bootstrap: str) -> dict[int, int]:
    """The raw topic's end offsets: what a refused request must leave unchanged."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()  # noqa: SLF001
        parts = [TopicPartition(topics.RAW, p) for p in consumer.partitions_for_topic(topics.RAW) or ()]
        return {tp.partition: offset for tp, offset in (await consumer.end_offsets(parts)).items()}
    finally:
        await consumer.stop()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class SlowSocket:
    """An HTTP/1.1 SSE reader on a raw socket with a small receive buffer, that reads only when told:
    the client that stalls. ``body()`` decodes the chunked body and says whether it ended cleanly."""

    def __init__(self, gw: GatewayProcess, path: str, headers: dict[str, str], rcvbuf: int = 4096) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect(("127.0.0.1", gw.port))
        lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.data = bytearray()

    def read_some(self, at_least: int, timeout: float = 30) -> None:
        self.sock.settimeout(timeout)
        while len(self.data) < at_least:
            chunk = self.sock.recv(65536)
            if not chunk:
                return
            self.data += chunk

    def read_to_end(self, timeout: float = 60) -> None:
        self.sock.settimeout(timeout)
        while chunk := self.sock.recv(65536):
            self.data += chunk
        self.sock.close()

    def close(self) -> None:
        self.sock.close()

    def body(self) -> tuple[int, bytes, bool]:
        """(status, the decoded body, whether the chunked body ended with its last-chunk)."""
        head, _, rest = bytes(self.data).partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        out, clean = bytearray(), False
        while rest:
            size_line, sep, rest = rest.partition(b"\r\n")
            if not sep:
                break
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                clean = True
                break
            if len(rest) < size:
                out += rest
                break
            out += rest[:size]
            rest = rest[size + 2 :]
        return status, bytes(out), clean


def _sse_ids(body: bytes) -> list[int]:
    return [int(line[4:]) for line in body.split(b"\n") if line.startswith(b"id: ")]


def _sse_types(body: bytes) -> list[str]:
    return [orjson.loads(line[6:])["type"] for line in body.split(b"\n") if line.startswith(b"data: ")]


@pytest.fixture
def gw_env() -> dict[str, str]:
    # a short lookback: each reader starts near the end of its partition (every run read here was just published)
    return {"RW_GATEWAY_LOOKBACK_S": "120", "RW_GATEWAY_FIRST_EVENT_TIMEOUT_S": "6", "RW_GATEWAY_CLIENT_STALL_S": "60", "RW_GATEWAY_CORS_ORIGINS": "http://app.example"}


@pytest.fixture
def gw(primed_group: Any, tmp_path: Path, gw_env: dict[str, str]) -> Any:
    process = GatewayProcess(primed_group, tmp_path / "gateway.log", extra_env=gw_env)
    yield process
    process.stop()


# -- a slow reader never gets a clean end of a partial run ---------------------------------------


async def test_a_reader_that_stalls_across_the_runs_end_gets_every_event_or_an_unclean_close(gw: GatewayProcess, primed_group: Any) -> None:
    """A reader with a 4 KiB receive buffer reads a little, stops while the rest of the run (and its
    RUN_FINISHED) arrives, then reads on: every event up to the terminal one, or a connection closed
    without the chunked body's end — then Last-Event-ID resumes to the end. Today's main closed it
    cleanly without the tail."""
    bootstrap = primed_group.kafka_bootstrap_servers
    run_id, thread_id = _ids("gw-slow")
    events = _padded_run(run_id, thread_id, 9000, 1000)  # more than the kernel's socket buffers (4 MiB) take
    head, tail = events[:6000], events[6000:]
    await _put_events(bootstrap, run_id, thread_id, head)
    reader = SlowSocket(gw, f"/v1/threads/{thread_id}/runs/{run_id}/events?audience=internal", auth("acme-internal"))
    try:
        reader.read_some(20_000)  # the stream started: the gateway is writing the first 6 MB
        await _put_events(bootstrap, run_id, thread_id, tail, first_seq=len(head))  # the run ends while it stalls
        await asyncio.sleep(4)
        reader.read_to_end()
    finally:
        reader.close()
    status, body, clean = reader.body()
    ids = _sse_ids(body)
    assert status == 200
    assert ids == list(range(len(ids)))  # in order, nothing skipped
    if clean:
        assert ids == list(range(len(events))) and _sse_types(body)[-1] == "RUN_FINISHED"
    else:  # cut off without a clean end: Last-Event-ID picks up exactly after the last event read
        async with httpx.AsyncClient(timeout=60) as client:
            rest = await read_sse(client, _events_url(gw, thread_id, run_id), {**auth("acme-internal"), "Last-Event-ID": str(ids[-1])})
        assert ids + rest.ids == list(range(len(events)))


async def test_a_reader_stalled_past_the_bound_is_cut_off_uncleanly_and_resumes(primed_group: Any, tmp_path: Path) -> None:
    """RW_GATEWAY_CLIENT_STALL_S: a reader that does not read for that long is dropped without the
    stream's end (never a clean close of a partial run) and resumes with Last-Event-ID."""
    bootstrap = primed_group.kafka_bootstrap_servers
    run_id, thread_id = _ids("gw-stall")
    events = _padded_run(run_id, thread_id, 8000, 1000)  # more than the kernel's socket buffers (4 MiB) take
    await _put_events(bootstrap, run_id, thread_id, events)
    gw = GatewayProcess(primed_group, tmp_path / "gateway.log", extra_env={"RW_GATEWAY_CLIENT_STALL_S": "2", "RW_GATEWAY_LOOKBACK_S": "120"})
    try:
        reader = SlowSocket(gw, f"/v1/threads/{thread_id}/runs/{run_id}/events?audience=internal", auth("acme-internal"))
        reader.read_some(20_000)
        await asyncio.sleep(6)
        reader.read_to_end()
        status, body, clean = reader.body()
        assert status == 200 and not clean
        ids = _sse_ids(body)
        assert ids and ids == list(range(len(ids))) and len(ids) < len(events)
        async with httpx.AsyncClient(timeout=60) as client:
            rest = await read_sse(client, _events_url(gw, thread_id, run_id), {**auth("acme-internal"), "Last-Event-ID": str(ids[-1])})
        assert ids + rest.ids == list(range(len(events)))
        assert gw.health()["dropped"] >= 1
        assert b"Traceback" not in gw.log.read_bytes()
    finally:
        gw.stop()


# -- bounded memory per client -------------------------------------------------------------------

STALLED = 30
RSS_BOUND_MB = 40
"""docs/gateway.md: 30 stalled readers of one finished 8 MB run add < 40 MB (each holds at most one
64 KiB piece plus the transport's 64 KiB high-water mark: ~4 MB, the rest is allocator slack)."""


async def test_stalled_readers_of_a_large_finished_run_keep_rss_bounded_and_it_falls_back(gw: GatewayProcess, primed_group: Any) -> None:
    bootstrap = primed_group.kafka_bootstrap_servers
    run_id, thread_id = _ids("gw-mem")
    events = _padded_run(run_id, thread_id, 8000, 1000)  # ~8 MB of SSE frames
    await _put_events(bootstrap, run_id, thread_id, events)
    async with httpx.AsyncClient(timeout=120) as client:
        whole = await read_sse(client, _events_url(gw, thread_id, run_id), auth("acme-internal"))
    assert whole.ids == list(range(len(events)))  # the run is held by the reader: the baseline includes it
    missing_run = f"not-yet-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(timeout=60) as client:  # its partition's reader loads its window now, not in the measurement
        assert (await client.get(_events_url(gw, thread_id, missing_run), headers=auth("acme-internal"))).status_code == 404
    await asyncio.sleep(1)
    base = _rss_mb(gw.proc.pid)
    readers = [SlowSocket(gw, f"/v1/threads/{thread_id}/runs/{run_id}/events?audience=internal", auth("acme-internal")) for _ in range(STALLED)]
    waiting = SlowSocket(gw, f"/v1/threads/{thread_id}/runs/{missing_run}/events?audience=internal", auth("acme-internal"))
    try:
        for r in readers:
            r.read_some(1)
        assert gw.health()["clients"] == STALLED + 1  # every connected reader, also one still waiting for its run
        peak = base
        for _ in range(8):
            await asyncio.sleep(0.3)
            peak = max(peak, _rss_mb(gw.proc.pid))
    finally:
        for r in [*readers, waiting]:
            r.close()
    assert peak - base < RSS_BOUND_MB, f"{STALLED} stalled readers took the gateway from {base:.0f} to {peak:.0f} MB"
    deadline = time.monotonic() + 15
    while gw.health()["clients"] and time.monotonic() < deadline:
        await asyncio.sleep(0.3)
    assert gw.health()["clients"] == 0 and gw.health()["buffered_bytes"] == 0
    after = _rss_mb(gw.proc.pid)
    print(f"gateway RSS: {base:.1f} MB before, {peak:.1f} MB with {STALLED} stalled readers, {after:.1f} MB after they left")
    assert after - base < RSS_BOUND_MB / 2  # returned after they left


# -- one id grammar ------------------------------------------------------------------------------


async def test_ids_outside_the_grammar_are_refused_with_400_before_publishing(gw: GatewayProcess, primed_group: Any) -> None:
    bootstrap = primed_group.kafka_bootstrap_servers
    before = await _raw_end(bootstrap)
    body = ANTHROPIC.read_bytes()
    bad = [("a/b", None), ("..", None), ("ok-run", "../x"), ("r-ü😀", None), ("has space", None), (".", None)]
    async with httpx.AsyncClient(timeout=30) as client:
        for run_id, thread_id in bad:
            headers = {**auth("acme-public"), "RW-Run-Id": run_id.encode(), **({"RW-Thread-Id": thread_id} if thread_id else {})}
            answer = await client.post(f"{gw.url}/v1/ingest/anthropic-messages", content=body, headers=headers)
            assert answer.status_code == 400, (run_id, thread_id, answer.text)
            assert "A-Z a-z 0-9" in answer.json()["error"]
        agent = {"threadId": "t/1", "runId": "r1", "state": {}, "messages": [], "tools": [], "context": [], "forwardedProps": {}}
        answer = await client.post(f"{gw.url}/v1/agent", json=agent, headers=auth("acme-public"))
        assert answer.status_code == 400 and "thread id" in answer.json()["error"]
        answer = await client.get(f"{gw.url}/v1/threads/t1/runs/r%20x/events", headers=auth("acme-public"))
        assert answer.status_code == 400
    with pytest.raises(BadId):
        async with Publisher(bootstrap) as publisher:
            async with publisher.run(provider="anthropic-messages", run_id="a/b"):
                pass
    done = subprocess.run(
        [sys.executable, "-m", "reasonwire.workers.cli", "ingest", "--provider", "anthropic-messages", "--run-id", "a/b", str(ANTHROPIC)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}, cwd=ROOT,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "run id must be" in done.stderr
    assert await _raw_end(bootstrap) == before  # nothing published by any of them


async def test_an_id_using_every_allowed_character_round_trips(spawn_worker: Any, gw: GatewayProcess, primed_group: Any) -> None:
    worker = spawn_worker()
    worker.wait_assigned()
    run_id, thread_id = f"r:1@x~y.z-{uuid.uuid4().hex[:6]}_Q", f"T.{uuid.uuid4().hex[:6]}:a@b~c-d_e"
    headers = {**auth("acme-internal"), "RW-Run-Id": run_id, "RW-Thread-Id": thread_id, "RW-Model": "claude-opus-4-5"}
    async with httpx.AsyncClient(timeout=60) as client:
        answer = await client.post(f"{gw.url}/v1/ingest/anthropic-messages", content=ANTHROPIC.read_bytes(), headers=headers)
        assert answer.status_code == 200 and answer.json()["run_id"] == run_id and answer.json()["thread_id"] == thread_id
        seen = await read_sse(client, _events_url(gw, thread_id, run_id), auth("acme-internal"))
    assert seen.status == 200 and seen.events[0]["type"] == "RUN_STARTED" and seen.events[-1]["type"] == "RUN_FINISHED"


# -- the wrong grammar, an empty body ------------------------------------------------------------


async def test_a_wrong_grammar_or_an_empty_body_is_refused_with_4xx_and_publishes_nothing(gw: GatewayProcess, primed_group: Any) -> None:
    bootstrap = primed_group.kafka_bootstrap_servers
    before = await _raw_end(bootstrap)
    async with httpx.AsyncClient(timeout=30) as client:
        for body in (OPENAI.read_bytes(), b"", b"\n\n"):
            run_id, thread_id = _ids("gw-wrong")
            headers = {**auth("acme-public"), "RW-Run-Id": run_id, "RW-Thread-Id": thread_id}
            answer = await client.post(f"{gw.url}/v1/ingest/anthropic-messages", content=body, headers=headers)
            assert answer.status_code == 422, answer.text
            error = answer.json()["error"]
            if body.strip():
                assert "this is not an anthropic-messages stream" in error and "it reads as openai-responses" in error
            else:
                assert "input held no events" in error
            assert "nothing was published" in error
    assert await _raw_end(bootstrap) == before


async def test_ingest_command_refuses_another_grammar_and_an_empty_file_with_translates_wording(primed_group: Any, tmp_path: Path) -> None:
    bootstrap = primed_group.kafka_bootstrap_servers
    before = await _raw_end(bootstrap)
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    cli = [sys.executable, "-m", "reasonwire.workers.cli"]
    translated = subprocess.run([*cli, "translate", "--provider", "anthropic-messages", str(OPENAI)], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    for capture, wording in ((OPENAI, translated.stderr), (empty, "reasonwire: error: input held no events\n")):
        run_id, _ = _ids("ingest-wrong")
        done = subprocess.run([*cli, "ingest", "--provider", "anthropic-messages", "--run-id", run_id, str(capture)], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr == wording  # the same one line as translate's
    assert translated.returncode == 2 and "this is not an anthropic-messages stream" in translated.stderr
    with pytest.raises(NotThisGrammar):
        async with Publisher(bootstrap) as publisher:
            async with publisher.run(provider="anthropic-messages", run_id=_ids("client-wrong")[0], check_grammar=True) as run:
                for line in OPENAI.read_text().splitlines():
                    await run.send(line)
    assert await _raw_end(bootstrap) == before


# -- an event too large for the topic ------------------------------------------------------------


async def test_a_50_mb_event_is_a_413_with_the_limit_before_anything_is_published(gw: GatewayProcess, primed_group: Any) -> None:
    bootstrap = primed_group.kafka_bootstrap_servers
    before = await _raw_end(bootstrap)
    run_id, thread_id = _ids("gw-huge")
    big = b'data: {"type":"message_start","message":{"id":"msg_1","pad":"' + b"x" * (50 * 1024 * 1024) + b'"}}\n\n'
    headers = {**auth("acme-public"), "RW-Run-Id": run_id, "RW-Thread-Id": thread_id}
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=60) as client:
        answer = await client.post(f"{gw.url}/v1/ingest/anthropic-messages", content=big, headers=headers)
    took = time.monotonic() - started
    assert answer.status_code == 413, answer.text[:300]
    limit = answer.json()["limit"]
    assert 900_000 < limit < 1_048_576 and f"{limit:,}" in answer.json()["error"]
    assert answer.json()["published"] == 0 and "nothing was published" in answer.json()["error"]
    assert took < 15
    assert await _raw_end(bootstrap) == before


# -- no cross-tenant signal ----------------------------------------------------------------------


async def test_another_tenants_run_answers_like_a_missing_one_and_tenant_b_can_use_the_same_id(gw: GatewayProcess, primed_group: Any) -> None:
    """Tenant acme holds run R. For globex, R answers exactly like a run that does not exist (status,
    body, and the same wait); globex's own R — requested before its first event — is served, with its
    own events only. Ingest on a thread id acme used works for globex too (threads are per tenant)."""
    bootstrap = primed_group.kafka_bootstrap_servers
    run_id, thread_id = _ids("gw-tenant")
    acme = _padded_run(run_id, thread_id, 3, 10)
    await _put_events(bootstrap, run_id, thread_id, acme, tenant="acme")
    async with httpx.AsyncClient(timeout=60) as client:
        assert (await read_sse(client, _events_url(gw, thread_id, run_id), auth("acme-internal"))).events == acme

        async def timed(url: str) -> tuple[int, Any, float]:
            started = time.monotonic()
            answer = await client.get(url, headers=auth("globex-key"))
            return answer.status_code, answer.json(), time.monotonic() - started

        never = "never-" + run_id
        await client.get(_events_url(gw, thread_id, never), headers=auth("acme-internal"))  # both partitions' readers warm
        others, missing = await asyncio.gather(timed(_events_url(gw, thread_id, run_id)), timed(_events_url(gw, thread_id, never)))
        assert others[:2] == missing[:2] == (404, {"error": "no such run in this thread"})
        assert abs(others[2] - missing[2]) < 1.0, (others[2], missing[2])

        globex = [dict(e, delta="globex") if e["type"] == "TEXT_MESSAGE_CONTENT" else e for e in acme]
        reading = asyncio.create_task(read_sse(client, _events_url(gw, thread_id, run_id), auth("globex-key")))
        await asyncio.sleep(1)  # globex is waiting for its own R while acme's R is in the log
        await _put_events(bootstrap, run_id, thread_id, globex, tenant="globex")
        seen = await reading
        assert seen.status == 200 and seen.events == globex

        for key in ("acme-public", "globex-key"):
            headers = {**auth(key), "RW-Run-Id": _ids("gw-thread")[0], "RW-Thread-Id": thread_id}
            answer = await client.post(f"{gw.url}/v1/ingest/anthropic-messages", content=ANTHROPIC.read_bytes(), headers=headers)
            assert answer.status_code == 200, (key, answer.text)


# -- curl as the docs say, a browser on another origin -------------------------------------------


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_the_docs_curl_ingest_command_works(gw: GatewayProcess) -> None:
    """docs/gateway.md's example, as written there (a chunked POST from a pipe; `-T` alone is a PUT)."""
    doc = (ROOT / "docs" / "gateway.md").read_text()
    assert "curl -X POST -T -" in doc
    run_id, thread_id = _ids("gw-curl")
    done = subprocess.run(
        ["curl", "-sS", "-X", "POST", "-T", "-", "-H", "Authorization: Bearer acme-public", "-H", f"RW-Run-Id: {run_id}", "-H", f"RW-Thread-Id: {thread_id}",
         f"{gw.url}/v1/ingest/anthropic-messages"],
        input=ANTHROPIC.read_bytes(), capture_output=True, timeout=60,
    )
    assert json.loads(done.stdout)["outcome"] == "end", done.stdout


def test_cors_lets_an_allowed_origin_in_and_no_other(gw: GatewayProcess) -> None:
    preflight = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
    allowed = httpx.options(f"{gw.url}/v1/agent", headers=preflight, timeout=10)
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "http://app.example"
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    other = httpx.options(f"{gw.url}/v1/agent", headers={**preflight, "Origin": "http://evil.example"}, timeout=10)
    assert "access-control-allow-origin" not in other.headers
    simple = httpx.get(f"{gw.url}/healthz", headers={"Origin": "http://app.example"}, timeout=10)
    assert simple.headers["access-control-allow-origin"] == "http://app.example"
    assert httpx.get(f"{gw.url}/readyz", timeout=10).json()["ready"] is True
