"""The normalizer worker on a real Kafka broker and a real Redis server.

Oracle: the offline translator (itself checked against expected.json) gives
the events each run must produce; the worker must produce exactly those, whatever
happens to the worker in between (rebalance, SIGKILL), and store artefacts
byte-identical to the provider's values.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from reasonwire.contracts.grammars import Grammar
from tests.conformance.oracle import assert_valid_stream, fixture_paths, translate_file
from tests.integration.conftest import Collector, send
from reasonwire.workers.services.ingress.records import OutgoingRecord, RunEnvelope, raw_records
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.io.store import ArtefactStore
from reasonwire.workers.translators import implemented

pytestmark = pytest.mark.integration

FIXTURES = [p for p in fixture_paths() if Grammar(p.parent.name) in implemented()]


def _run(path: Path, tag: str) -> tuple[RunEnvelope, list[OutgoingRecord]]:
    run = RunEnvelope(path.parent.name, f"{tag}-{path.stem}-{uuid.uuid4().hex[:6]}", f"thread-{uuid.uuid4().hex[:6]}", tenant="acme")
    with path.open() as f:
        return run, list(raw_records(run, read_events(f)))


def _offline(path: Path, run: RunEnvelope) -> Any:
    return translate_file(run.grammar, path, run_id=run.run_id, thread_id=run.thread_id, model=run.model)


async def test_every_fixture_round_trips_raw_to_events_and_redis(spawn_worker: Any, producer: Any, redis: Any, primed_group: Any) -> None:
    worker = spawn_worker()
    worker.wait_assigned()
    runs = [(path, *_run(path, "rt")) for path in FIXTURES]
    for _, _, records in runs:
        await send(producer, records)
    async with Collector(primed_group.kafka_bootstrap_servers) as c:
        await c.until(lambda c: all(c.finished(run.run_id) and c.usage.get(run.run_id) for _, run, _ in runs))
    store = ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60)
    for path, run, _ in runs:
        offline = _offline(path, run)
        assert c.stream(run.run_id) == offline.events, path.name
        assert_valid_stream(c.stream(run.run_id))
        stored = await store.thread_artefacts("acme", run.thread_id)
        assert [(a.value, a.complete) for a in stored] == [(a.value, a.complete) for a in offline.artefacts], path.name
        assert all(a.tenant == "acme" and a.created_at_ms for a in stored)
        assert len(c.usage[run.run_id]) == 1


async def test_bad_input_is_dead_lettered_with_its_bytes_and_the_worker_keeps_running(spawn_worker: Any, producer: Any, primed_group: Any) -> None:
    worker = spawn_worker()
    worker.wait_assigned()
    tag = uuid.uuid4().hex[:8]
    bad = [
        OutgoingRecord(f"nohdr-{tag}".encode(), b"\x00\xffnot json", []),
        OutgoingRecord(f"grammar-{tag}".encode(), b"{}", [("rw-run-id", f"grammar-{tag}".encode()), ("rw-provider", b"smoke-signals"), ("rw-seq", b"0")]),
    ]
    path = FIXTURES[0]
    run, records = _run(path, "after-bad")
    records[2] = OutgoingRecord(records[2].key, b"{definitely not json", records[2].headers)
    await send(producer, bad + records)
    async with Collector(primed_group.kafka_bootstrap_servers) as c:
        await c.until(lambda c: c.finished(run.run_id) and len([d for d in c.dlq if tag.encode() in (d[0] or b"") or d[2].get("rw-run-id") == run.run_id]) >= 3)
    mine = {(d[0] or b"").decode(): d for d in c.dlq if tag.encode() in (d[0] or b"")}
    assert mine[f"nohdr-{tag}"][1] == b"\x00\xffnot json" and "missing header rw-run-id" in mine[f"nohdr-{tag}"][2]["rw-dlq-reason"]
    assert "unknown grammar" in mine[f"grammar-{tag}"][2]["rw-dlq-reason"]
    # the malformed record; the run's later records follow it as run_ended
    [in_run] = [d for d in c.dlq if d[2].get("rw-run-id") == run.run_id and d[2].get("rw-dlq-code") == "malformed_event"]
    assert in_run[1] == b"{definitely not json" and "line 3" in in_run[2]["rw-dlq-reason"]
    stream = c.stream(run.run_id)
    assert stream[-1]["type"] == "RUN_ERROR" and stream[-1]["code"] == "malformed_event"  # R7
    assert_valid_stream(stream)
    assert worker.proc.poll() is None


async def _half_then_rest(producer: Any, runs: list[tuple[Path, RunEnvelope, list[OutgoingRecord]]], between: Any, bootstrap: str) -> Collector:
    for _, _, records in runs:
        await send(producer, records[: len(records) // 2])
    async with Collector(bootstrap) as c:
        await c.until(lambda c: all(run.run_id in c.events for _, run, _ in runs))
    await between()
    for _, _, records in runs:
        await send(producer, records[len(records) // 2 :])
    collector = Collector(bootstrap)
    async with collector:
        await collector.until(lambda c: all(c.finished(run.run_id) for _, run, _ in runs), timeout=120)
    return collector


def _assert_nothing_lost(c: Collector, runs: list[tuple[Path, RunEnvelope, list[OutgoingRecord]]]) -> None:
    for path, run, _ in runs:
        stream = c.stream(run.run_id)
        assert_valid_stream(stream)
        assert stream == _offline(path, run).events, path.name


async def test_second_worker_joining_mid_stream_loses_nothing(spawn_worker: Any, producer: Any, primed_group: Any) -> None:
    first = spawn_worker()
    first.wait_assigned()
    runs = [(path, *_run(path, "rebalance")) for path in FIXTURES for _ in range(2)]

    async def join() -> None:
        second = spawn_worker()
        second.wait_assigned()
        await asyncio.sleep(1)

    c = await _half_then_rest(producer, runs, join, primed_group.kafka_bootstrap_servers)
    _assert_nothing_lost(c, runs)


async def test_worker_killed_mid_run_is_replaced_and_loses_nothing(spawn_worker: Any, producer: Any, primed_group: Any) -> None:
    first = spawn_worker()
    first.wait_assigned()
    runs = [(path, *_run(path, "sigkill")) for path in FIXTURES]

    async def kill_and_replace() -> None:
        first.kill()
        replacement = spawn_worker()
        replacement.wait_assigned(timeout=90)

    c = await _half_then_rest(producer, runs, kill_and_replace, primed_group.kafka_bootstrap_servers)
    _assert_nothing_lost(c, runs)


async def test_deepseek_reasoning_content_is_stored_byte_for_byte_and_read_back_by_the_store_R3_R8(
    spawn_worker: Any, producer: Any, redis: Any, primed_group: Any
) -> None:
    """The Chat Completions grammar through the worker: a DeepSeek tool-call turn published with
    ``rw-issuer-provider: deepseek`` leaves its whole reasoning text in Redis as one complete
    ``deepseek.reasoning_content`` record bound to that provider, never announced on the topic;
    a vLLM turn named ``vllm`` leaves nothing."""
    worker = spawn_worker()
    worker.wait_assigned()
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "openai-chat-completions"
    tag = uuid.uuid4().hex[:6]
    runs = []
    for name, provider in (("c1_deepseek_tool_loop_turn1", "deepseek"), ("d_vllm_reasoning_field", "vllm")):
        run = RunEnvelope("openai-chat-completions", f"chat-{name[:2]}-{tag}", f"thread-chat-{name[:2]}-{tag}", tenant="acme", issuer_provider=provider)
        with (folder / f"{name}.jsonl").open() as f:
            await send(producer, list(raw_records(run, read_events(f))))
        runs.append((name, run))
    async with Collector(primed_group.kafka_bootstrap_servers) as c:
        await c.until(lambda c: all(c.finished(run.run_id) for _, run in runs))
    store = ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60)
    (_, deepseek), (_, vllm) = runs
    [stored] = await store.thread_artefacts("acme", deepseek.thread_id)
    expected = json.loads((folder / "c1_deepseek_tool_loop_turn1.expected.json").read_text())
    assert stored.value == expected["reasoning_messages"][0]["text"] and stored.complete
    assert (stored.kind, stored.issuer.provider, stored.native.value_path) == ("deepseek.reasoning_content", "deepseek", ["reasoning_content"])
    assert stored.entity_id == next(e["messageId"] for e in c.stream(deepseek.run_id) if e["type"] == "REASONING_MESSAGE_START")
    assert not any(e["type"] == "REASONING_ENCRYPTED_VALUE" for e in c.stream(deepseek.run_id))
    assert_valid_stream(c.stream(deepseek.run_id))
    assert await store.thread_artefacts("acme", vllm.thread_id) == []
