"""Malformed input is never acknowledged as success (R7): ``reasonwire ingest`` and
``POST /v1/ingest/{provider}`` refuse an event the grammar's translator rejects — not JSON, not the
grammar — naming its line as ``translate`` does, before its record is published. A capture file is
checked whole first (nothing published); a live stream that already started is aborted, and the
answer says so. Real broker, Redis, worker and gateway; no mocks."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from reasonwire.contracts import topics
from tests.integration.conftest import ROOT, Collector
from tests.integration.gateway_support import GatewayProcess, auth

pytestmark = pytest.mark.integration

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"
CLI = [sys.executable, "-m", "reasonwire.workers.cli"]


def _run_id(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


async def _raw_of(bootstrap: str, run_id: str, settle_s: float = 2.0) -> list[Any]:
    """Every record of ``run_id`` on the raw topic (read until nothing new comes for ``settle_s``)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()  # noqa: SLF001
        parts = [TopicPartition(topics.RAW, p) for p in consumer.partitions_for_topic(topics.RAW) or ()]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        found: list[Any] = []
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            for batch in (await consumer.getmany(timeout_ms=int(settle_s * 1000))).values():
                found += [m for m in batch if m.key == run_id.encode()]
        return found
    finally:
        await consumer.stop()


def _ingest(bootstrap: str, run_id: str, capture: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    return subprocess.run([*CLI, "ingest", "--provider", "anthropic-messages", "--run-id", run_id, str(capture)], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)


async def test_ingest_refuses_a_capture_with_a_line_that_is_not_json_naming_the_line_and_publishing_nothing(primed_group: Any, tmp_path: Path) -> None:
    """R7: a non-JSON line — first or later — is refused with exit 1 naming the line, as
    ``translate`` names it; a file is checked whole before anything is published."""
    bootstrap = primed_group.kafka_bootstrap_servers
    lines = CAPTURE.read_text().splitlines()
    for position in (0, 5):
        capture = tmp_path / f"broken-{position}.jsonl"
        capture.write_text("\n".join([*lines[:position], "this is not JSON", *lines[position:]]) + "\n")
        translated = subprocess.run([*CLI, "translate", "--provider", "anthropic-messages", str(capture)], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert translated.returncode == 1 and f"input line {position + 1}:" in translated.stderr
        run_id = _run_id("ingest-notjson")
        done = _ingest(bootstrap, run_id, capture)
        assert done.returncode == 1, done.stderr
        assert done.stdout == ""  # no "outcome": "end"
        assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"reasonwire: error: input line {position + 1}: ")
        assert "nothing was published" in done.stderr
        assert await _raw_of(bootstrap, run_id) == []


async def test_ingest_of_a_live_stream_aborts_the_run_at_a_malformed_line_and_the_worker_ends_it_once(spawn_worker: Any, primed_group: Any) -> None:
    """A pipe cannot be read ahead: the events before the bad line are published, the bad line
    never is, the run is aborted (exit 1, ``"outcome": "abort"``), and the worker ends it once —
    no ``malformed_event``, no ``run_ended`` dead letters."""
    worker = spawn_worker()
    worker.wait_assigned()
    bootstrap = primed_group.kafka_bootstrap_servers
    run_id = _run_id("ingest-live-bad")
    lines = CAPTURE.read_text().splitlines()
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    proc = await asyncio.create_subprocess_exec(
        *CLI, "ingest", "--provider", "anthropic-messages", "--run-id", run_id, "-",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    assert proc.stdin is not None
    for line in lines[:4]:
        proc.stdin.write(line.encode() + b"\n")
    await proc.stdin.drain()
    await asyncio.sleep(1.0)
    proc.stdin.write(b"{not json\n" + "\n".join(lines[4:]).encode() + b"\n")
    proc.stdin.close()
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1, err.decode()
    assert err.decode() == f"reasonwire: error: input line 5: {_reason(lines)}; run {run_id} aborted after 4 events\n"
    assert json.loads(out) == {"run_id": run_id, "published": 4, "outcome": "abort"}
    raw = await _raw_of(bootstrap, run_id)
    assert [m.value for m in raw[:-1]] == [line.encode() for line in lines[:4]]
    assert dict(raw[-1].headers)["rw-control"] == b"abort"
    async with Collector(bootstrap) as c:
        await c.until(lambda c: c.finished(run_id))
        await asyncio.sleep(1.0)
        await c.until(lambda c: True)
    stream = c.stream(run_id)
    assert [e["type"] for e in stream].count("RUN_ERROR") + [e["type"] for e in stream].count("RUN_FINISHED") == 1
    assert not [d for d in c.dlq if d[0] == run_id.encode()]


def _reason(lines: list[str]) -> str:
    """What the translator says about ``{not json`` after ``lines[:4]`` (the worker's own verdict)."""
    from reasonwire.workers.translators import translator_for

    translator = translator_for("anthropic-messages")
    for line in lines[:4]:
        translator.feed(line.encode())
    rejection = translator.feed(b"{not json").rejection
    assert rejection is not None
    return rejection.reason


async def test_http_ingest_refuses_a_malformed_line_with_400_naming_it(primed_group: Any, tmp_path: Path) -> None:
    """``POST /v1/ingest``: a first line that is not JSON is a 400 naming line 1, nothing published;
    a malformed line after good ones is a 400 saying the run was aborted after them — never 200."""
    bootstrap = primed_group.kafka_bootstrap_servers
    gw = GatewayProcess(primed_group, tmp_path / "gateway.log")
    lines = CAPTURE.read_text().splitlines()
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            first = _run_id("http-notjson")
            answer = await client.post(f"{gw.url}/v1/ingest/anthropic-messages", content=("oops\n" + "\n".join(lines)).encode(),
                                       headers={**auth("acme-public"), "RW-Run-Id": first})
            assert answer.status_code == 400, answer.text
            body = answer.json()
            assert body["error"].startswith("input line 1: ") and body["error"].endswith("nothing was published")
            assert body["line"] == 1 and body["published"] == 0

            later = _run_id("http-later-bad")
            answer = await client.post(f"{gw.url}/v1/ingest/anthropic-messages", content=("\n".join([*lines[:3], "[1, 2"])).encode(),
                                       headers={**auth("acme-public"), "RW-Run-Id": later})
            assert answer.status_code == 400, answer.text
            assert answer.json()["line"] == 4 and answer.json()["published"] == 3
            assert "the run was aborted after 3 events" in answer.json()["error"]

            unknown = await client.post(f"{gw.url}/v1/ingest/no-such-grammar", content=b"{}", headers={**auth("acme-public"), "RW-Run-Id": _run_id("x")})
            assert unknown.status_code == 404 and "one of: " in unknown.json()["error"]
    finally:
        gw.stop()
    assert await _raw_of(bootstrap, first) == []
    raw = await _raw_of(bootstrap, later)
    assert [m.value for m in raw[:-1]] == [line.encode() for line in lines[:3]]
    assert dict(raw[-1].headers)["rw-control"] == b"abort"
