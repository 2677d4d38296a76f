"""The ingress client on the real broker, Redis and normalizer worker: one object per run."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from reasonwire.contracts import topics
from tests.conformance.oracle import assert_valid_stream, translate_file
from tests.integration.conftest import Collector
from tests.signals import ctrl_c_as_in_a_terminal
from reasonwire.workers.services.ingress.publisher import IngressError, Publisher

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CAPTURE = FIXTURES / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"


def _ids(tag: str) -> tuple[str, str]:
    return f"{tag}-{uuid.uuid4().hex[:8]}", f"thread-{uuid.uuid4().hex[:8]}"


async def _raw_records(bootstrap: str, run_id: str, count: int) -> list[Any]:
    """The run's records on reasoning.raw.v1, read back from the broker."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    try:
        parts = [TopicPartition(topics.RAW, p) for p in consumer.partitions_for_topic(topics.RAW) or await _parts(consumer)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        found: list[Any] = []
        for _ in range(120):
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                found += [m for m in batch if m.key == run_id.encode()]
            if len(found) >= count:
                return found
        return found
    finally:
        await consumer.stop()


async def _parts(consumer: AIOKafkaConsumer) -> set[int]:
    await consumer._client.force_metadata_update()  # noqa: SLF001 - first metadata fetch
    return consumer.partitions_for_topic(topics.RAW) or set()


async def test_sse_lines_published_by_the_client_are_normalized_like_the_capture(spawn_worker: Any, primed_group: Any) -> None:
    """One call per line of a provider's raw SSE: rw-seq numbered, every header set, end on exit."""
    worker = spawn_worker()
    worker.wait_assigned()
    run_id, thread_id = _ids("ingress")
    lines = CAPTURE.read_text().splitlines()
    async with Publisher(primed_group.kafka_bootstrap_servers) as publisher:
        async with publisher.run(provider="anthropic-messages", run_id=run_id, thread_id=thread_id, tenant="acme", model="claude-opus-4-5") as run:
            for line in lines:  # as an SDK's iter_lines yields them: event:, data:, blank
                await run.send(b"event: x")
                await run.send(b"data: " + line.encode())
                await run.send(b"")
        assert run.published == len(lines) and run.outcome == "end"
    async with Collector(primed_group.kafka_bootstrap_servers) as c:
        await c.until(lambda c: c.finished(run_id))
    offline = translate_file("anthropic-messages", CAPTURE, run_id=run_id, thread_id=thread_id, model="claude-opus-4-5")
    assert c.stream(run_id) == offline.events
    assert_valid_stream(c.stream(run_id))
    raw = await _raw_records(primed_group.kafka_bootstrap_servers, run_id, len(lines) + 1)
    headers = [dict((k, v.decode()) for k, v in m.headers) for m in raw]
    assert [h["rw-seq"] for h in headers] == [str(i) for i in range(len(lines) + 1)]
    assert all(h["rw-tenant"] == "acme" and h["rw-thread-id"] == thread_id and h["rw-model"] == "claude-opus-4-5" for h in headers)
    assert [m.value for m in raw[:-1]] == [line.encode() for line in lines]  # bytes unchanged (R3)
    assert headers[-1]["rw-control"] == "end" and raw[-1].value is None


async def test_an_exception_in_the_block_publishes_abort_and_the_run_ends_interrupted(spawn_worker: Any, primed_group: Any) -> None:
    worker = spawn_worker()
    worker.wait_assigned()
    run_id, thread_id = _ids("ingress-abort")
    lines = CAPTURE.read_text().splitlines()[:4]
    async with Publisher(primed_group.kafka_bootstrap_servers) as publisher:
        with pytest.raises(ConnectionResetError):
            async with publisher.run(provider="anthropic-messages", run_id=run_id, thread_id=thread_id, tenant="acme") as run:
                for line in lines:
                    await run.send(line)  # bare data payloads
                raise ConnectionResetError("provider connection dropped")
        assert run.outcome == "abort"
    async with Collector(primed_group.kafka_bootstrap_servers) as c:
        await c.until(lambda c: c.finished(run_id))
    stream = c.stream(run_id)
    assert_valid_stream(stream)
    assert stream[-1]["type"] in ("RUN_ERROR", "RUN_FINISHED")
    raw = await _raw_records(primed_group.kafka_bootstrap_servers, run_id, len(lines) + 1)
    assert dict(raw[-1].headers)["rw-control"] == b"abort"


async def test_a_cancelled_task_still_publishes_abort(primed_group: Any) -> None:
    run_id, thread_id = _ids("ingress-cancel")
    started = asyncio.Event()

    async def producer_task(publisher: Publisher) -> None:
        async with publisher.run(provider="anthropic-messages", run_id=run_id, thread_id=thread_id) as run:
            await run.send(CAPTURE.read_text().splitlines()[0])
            started.set()
            await asyncio.sleep(60)

    async with Publisher(primed_group.kafka_bootstrap_servers) as publisher:
        task = asyncio.create_task(producer_task(publisher))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    raw = await _raw_records(primed_group.kafka_bootstrap_servers, run_id, 2)
    assert [dict(m.headers).get("rw-control") for m in raw] == [None, b"abort"]


async def test_a_record_the_broker_refuses_raises_in_the_caller(primed_group: Any) -> None:
    """Nothing is lost silently: a producer failure surfaces as IngressError."""
    run_id, thread_id = _ids("ingress-fail")
    async with Publisher(primed_group.kafka_bootstrap_servers, max_request_size=256) as publisher:
        with pytest.raises(IngressError, match="did not take"):
            async with publisher.run(provider="anthropic-messages", run_id=run_id, thread_id=thread_id) as run:
                await run.send(b'{"type":"ping","pad":"' + b"x" * 1024 + b'"}')


async def test_ingest_command_publishes_lines_of_an_open_pipe_before_eof(primed_group: Any) -> None:
    """`curl -N … | reasonwire ingest …`: records go out as lines arrive, not at end of input."""
    run_id, thread_id = _ids("ingest-cli")
    lines = CAPTURE.read_text().splitlines()
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": primed_group.kafka_bootstrap_servers}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "reasonwire.workers.cli", "ingest", "--provider", "anthropic-messages", "--run-id", run_id,
        "--thread-id", thread_id, "--tenant", "acme", "-",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    assert proc.stdin is not None
    for line in lines[:3]:
        proc.stdin.write(b"data: " + line.encode() + b"\n\n")
        await proc.stdin.drain()
        await asyncio.sleep(0.2)
    early = await _raw_records(primed_group.kafka_bootstrap_servers, run_id, 3)
    assert proc.returncode is None  # stdin still open, the command still running
    assert [m.value for m in early] == [line.encode() for line in lines[:3]]
    for line in lines[3:]:
        proc.stdin.write(line.encode() + b"\n")  # bare payload lines work too
    proc.stdin.close()
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert json.loads(out) == {"run_id": run_id, "published": len(lines), "outcome": "end"}
    raw = await _raw_records(primed_group.kafka_bootstrap_servers, run_id, len(lines) + 1)
    assert [m.value for m in raw[:-1]] == [line.encode() for line in lines]
    assert dict(raw[-1].headers)["rw-control"] == b"end"


def test_ingest_command_names_an_unreadable_file_in_one_line(tmp_path: Path) -> None:
    from reasonwire.workers.cli import main

    assert main(["ingest", "--provider", "anthropic-messages", "--run-id", "r", str(tmp_path / "missing.sse")]) == 2


async def test_ingest_command_interrupted_publishes_abort(primed_group: Any) -> None:
    """Ctrl-C on `curl … | reasonwire ingest …`: what arrived is published, then abort."""
    import signal

    run_id, thread_id = _ids("ingest-sigint")
    lines = CAPTURE.read_text().splitlines()
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": primed_group.kafka_bootstrap_servers}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "reasonwire.workers.cli", "ingest", "--provider", "anthropic-messages", "--run-id", run_id, "--thread-id", thread_id,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        preexec_fn=ctrl_c_as_in_a_terminal,
    )
    assert proc.stdin is not None
    for line in lines[:2]:
        proc.stdin.write(line.encode() + b"\n")
    await proc.stdin.drain()
    assert len(await _raw_records(primed_group.kafka_bootstrap_servers, run_id, 2)) == 2
    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err
    assert json.loads(out) == {"run_id": run_id, "published": 2, "outcome": "abort"}
    raw = await _raw_records(primed_group.kafka_bootstrap_servers, run_id, 3)
    assert dict(raw[-1].headers)["rw-control"] == b"abort"
