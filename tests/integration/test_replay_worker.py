"""The whole continuity loop on the real broker and Redis.

Provider stream → ``reasoning.raw.v1`` → normalizer worker → AG-UI events on Kafka and
artefacts in Redis → the client's history (the events applied) → a request on
``reasoning.replay.requests.v1`` → the replay worker → the reply's provider-native
fragment, which must be the fixture's ``replay`` items (P5). The same request for
another tenant never receives that state (R8).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from reasonwire.contracts import topics
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayReply, ReplayRequest, ReplayTarget
from tests.conformance.oracle import assert_valid_stream
from tests.integration.conftest import Collector, WorkerProcess, send
from tests.unit.test_replay_roundtrip import (
    comparable,
    expected_of,
    expected_request_items,
    opaque_hashes,
    replay_fixtures,
    replay_items,
    request_model,
    tool_results,
    user_text,
)
from reasonwire.workers.replay.consumer import AgUiConsumer
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.replay import FRAGMENT_KEY
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.sse import read_events

pytestmark = pytest.mark.integration

CASES = [p for p in replay_fixtures() if p.stem.startswith("b_")]
"""One tool-call turn per grammar that has a translator: the stateless next turn (P9)."""


@pytest.fixture
def replay_worker(primed_group: WorkerSettings, tmp_path: Path) -> Iterator[WorkerProcess]:
    group = {"RW_REPLAY_GROUP_ID": f"rw-replay-test-{uuid.uuid4().hex[:8]}"}
    worker = WorkerProcess(primed_group, tmp_path / "replay-worker.log", group, kind="replay")
    try:
        worker.wait_assigned()
        yield worker
    finally:
        worker.stop()


@pytest_asyncio.fixture
async def replies(services: dict[str, str]) -> AsyncIterator[AIOKafkaConsumer]:
    consumer = AIOKafkaConsumer(
        topics.REPLAY_REPLIES, bootstrap_servers=services["KAFKA_BOOTSTRAP_SERVERS"], auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    yield consumer
    await consumer.stop()


async def ask(producer: AIOKafkaProducer, replies: AIOKafkaConsumer, request: ReplayRequest, timeout: float = 60) -> ReplayReply:
    body = request.model_dump_json(by_alias=True, exclude_none=True).encode()
    thread = (request.thread_id or "").encode()
    await producer.send_and_wait(topics.REPLAY_REQUESTS, body, key=thread)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = await replies.getmany(timeout_ms=500)
        for records in batch.values():
            for record in records:
                if record.key == request.request_id.encode():
                    return ReplayReply.model_validate_json(record.value)
    raise AssertionError(f"no reply to {request.request_id}")


@pytest.mark.skipif(not CASES, reason="no grammar with a tool-call replay fixture has a translator yet")
async def test_the_next_turn_is_rebuilt_over_kafka_from_the_stored_state_P5_R8(
    spawn_worker: Any,
    replay_worker: WorkerProcess,
    producer: AIOKafkaProducer,
    replies: AIOKafkaConsumer,
    primed_group: Any,
) -> None:
    normalizer = spawn_worker()
    normalizer.wait_assigned()
    runs = []
    for path in CASES:
        expected = expected_of(path)
        run = RunEnvelope(
            path.parent.name,
            f"replay-{path.parent.name}-{uuid.uuid4().hex[:6]}",
            f"thread-{uuid.uuid4().hex[:8]}",
            tenant="acme",
            model=request_model(expected),
        )
        with path.open() as f:
            await send(producer, list(raw_records(run, read_events(f))))
        runs.append((path, run))
    async with Collector(primed_group.kafka_bootstrap_servers) as c:
        await c.until(lambda c: all(c.finished(run.run_id) for _, run in runs))

    for path, run in runs:
        grammar = Grammar(path.parent.name)
        stream = c.stream(run.run_id)
        assert_valid_stream(stream)
        items = replay_items(path) or []
        client = AgUiConsumer()
        client.add_message({"id": "user-1", "role": "user", "content": user_text(grammar, expected_of(path), items)})
        assert client.feed_all(stream).fatal is None
        calls = [call.id for m in client.messages for call in (getattr(m, "tool_calls", None) or [])]
        for n, (call_id, result) in enumerate(tool_results(grammar, items)):
            client.add_message({"id": f"tool-{n}", "role": "tool", "toolCallId": call_id or calls[n], "content": result})
        history = client.run_input(thread_id=run.thread_id, run_id=f"{run.run_id}-next")
        target = ReplayTarget(grammar=grammar, model=run.model)

        mine = ReplayRequest(request_id=uuid.uuid4().hex, tenant="acme", target=target, history=history)
        reply = await ask(producer, replies, mine)
        assert reply.ok, reply.error
        produced = reply.fragment[FRAGMENT_KEY[grammar]]  # type: ignore[index]
        assert comparable(grammar, produced) == comparable(grammar, expected_request_items(path)), path.name

        theirs = ReplayRequest(request_id=uuid.uuid4().hex, tenant="globex", target=target, history=history)
        stranger = await ask(producer, replies, theirs)
        if stranger.ok:
            assert opaque_hashes(stranger.fragment) == [], path.name
            assert any(w.code == "unverified_client_value" for w in stranger.warnings)
        else:
            assert stranger.error is not None and stranger.error.code == "provider_would_reject", path.name
        assert stranger.request_id != reply.request_id

    # a bare messages array and no thread_id: no thread to read — refused, answered, the worker goes on
    no_thread = ReplayRequest(request_id=uuid.uuid4().hex, target=ReplayTarget(grammar=Grammar.ANTHROPIC_MESSAGES), history=[])
    refused = await ask(producer, replies, no_thread)
    assert not refused.ok and refused.error is not None and refused.error.code == "invalid_request"
    assert replay_worker.proc.poll() is None
