"""The gateway on the real broker, Redis and normalizer worker: AG-UI SSE out, tenancy, fan-out."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from reasonwire.contracts import topics
from tests.conformance.oracle import translate_file
from tests.integration.gateway_support import GatewayProcess, auth, gateway, read_sse  # noqa: F401 - fixture
from reasonwire.workers.core.audience import AudienceFilter
from reasonwire.workers.services.ingress.publisher import Publisher

pytestmark = pytest.mark.integration

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"


def _ids(tag: str) -> tuple[str, str]:
    return f"{tag}-{uuid.uuid4().hex[:8]}", f"thread-{uuid.uuid4().hex[:8]}"


def _url(gw: GatewayProcess, thread_id: str, run_id: str, audience: str | None = None) -> str:
    return f"{gw.url}/v1/threads/{thread_id}/runs/{run_id}/events" + (f"?audience={audience}" if audience else "")


async def _publish(bootstrap: str, run_id: str, thread_id: str, lines: list[str], *, tenant: str = "acme", pause_after: int | None = None, pause: float = 0) -> None:
    async with Publisher(bootstrap) as publisher:
        async with publisher.run(provider="anthropic-messages", run_id=run_id, thread_id=thread_id, tenant=tenant, model="claude-opus-4-5") as run:
            for n, line in enumerate(lines):
                if n == pause_after:
                    await asyncio.sleep(pause)
                await run.send(line)


def _offline(run_id: str, thread_id: str) -> list[dict[str, Any]]:
    return translate_file("anthropic-messages", CAPTURE, run_id=run_id, thread_id=thread_id, model="claude-opus-4-5").events


def _public(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from reasonwire.contracts.policy import Audience, RetentionPolicy

    audience = AudienceFilter(RetentionPolicy().rule(Audience.PUBLIC))
    return [kept for e in events if (kept := audience.admit(e)) is not None]


async def test_an_ended_run_is_served_whole_in_seq_order_and_the_stream_closes(spawn_worker: Any, gateway: GatewayProcess, primed_group: Any) -> None:
    worker = spawn_worker()
    worker.wait_assigned()
    run_id, thread_id = _ids("gw-whole")
    await _publish(primed_group.kafka_bootstrap_servers, run_id, thread_id, CAPTURE.read_text().splitlines())
    async with httpx.AsyncClient(timeout=60) as client:
        internal = await read_sse(client, _url(gateway, thread_id, run_id, "internal"), auth("acme-internal"))
        public = await read_sse(client, _url(gateway, thread_id, run_id), auth("acme-public"))
    expected = _offline(run_id, thread_id)
    assert internal.status == 200 and internal.events == expected  # closed after RUN_FINISHED: read_sse returned
    assert internal.ids == list(range(len(expected)))
    assert any(e["type"] == "REASONING_ENCRYPTED_VALUE" for e in internal.events)
    assert public.events == _public(expected) and public.ids == list(range(len(public.events)))
    assert not any(e["type"] == "REASONING_ENCRYPTED_VALUE" for e in public.events)  # P1/R8: never to a UI


async def test_last_event_id_resumes_exactly_after_that_event(spawn_worker: Any, gateway: GatewayProcess, primed_group: Any) -> None:
    worker = spawn_worker()
    worker.wait_assigned()
    run_id, thread_id = _ids("gw-resume")
    await _publish(primed_group.kafka_bootstrap_servers, run_id, thread_id, CAPTURE.read_text().splitlines())
    async with httpx.AsyncClient(timeout=60) as client:
        first = await read_sse(client, _url(gateway, thread_id, run_id, "internal"), auth("acme-internal"), limit=7)
        rest = await read_sse(client, _url(gateway, thread_id, run_id, "internal"), {**auth("acme-internal"), "Last-Event-ID": str(first.ids[-1])})
    expected = _offline(run_id, thread_id)
    assert first.ids == list(range(7))
    assert rest.ids == list(range(7, len(expected)))
    assert first.events + rest.events == expected


async def test_duplicate_and_out_of_order_event_records_reach_a_client_once_in_seq_order(gateway: GatewayProcess, primed_group: Any) -> None:
    """A normalizer that rewinds republishes seqs it already sent; the client sees each once."""
    run_id, thread_id = _ids("gw-dup")
    events = [
        {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id},
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "hello"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
        {"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id},
    ]
    order = [0, 1, 2, 1, 2, 0, 4, 3, 4]  # repeats, and 4 before 3
    producer = AIOKafkaProducer(bootstrap_servers=primed_group.kafka_bootstrap_servers, acks="all")
    await producer.start()
    try:
        for seq in order:
            headers = [("rw-run-id", run_id.encode()), ("rw-thread-id", thread_id.encode()), ("rw-tenant", b"acme"), ("rw-event-seq", str(seq).encode())]
            await producer.send_and_wait(topics.EVENTS_PUBLIC, orjson.dumps(events[seq]), key=run_id.encode(), headers=headers)
    finally:
        await producer.stop()
    async with httpx.AsyncClient(timeout=60) as client:
        seen = await read_sse(client, _url(gateway, thread_id, run_id), auth("acme-public"))
    assert seen.ids == [0, 1, 2, 3, 4]
    assert seen.events == events


async def test_keys_and_tenants_401_without_a_key_404_for_another_tenant_403_for_an_ungranted_audience(spawn_worker: Any, gateway: GatewayProcess, primed_group: Any) -> None:
    worker = spawn_worker()
    worker.wait_assigned()
    run_id, thread_id = _ids("gw-tenancy")
    await _publish(primed_group.kafka_bootstrap_servers, run_id, thread_id, CAPTURE.read_text().splitlines())
    async with httpx.AsyncClient(timeout=60) as client:
        assert (await read_sse(client, _url(gateway, thread_id, run_id), {})).status == 401
        assert (await read_sse(client, _url(gateway, thread_id, run_id), auth("not-a-key"))).status == 401
        ok = await read_sse(client, _url(gateway, thread_id, run_id), auth("acme-public"))
        assert ok.status == 200 and ok.events
        loop = asyncio.get_running_loop()
        started = loop.time()
        other = await read_sse(client, _url(gateway, thread_id, run_id), auth("globex-key"))
        assert other.status == 404 and not other.events  # never the other tenant's events
        assert loop.time() - started >= 7  # answered like a missing run, after the same wait: timing does not reveal the run
        assert (await read_sse(client, _url(gateway, "another-thread", run_id), auth("acme-public"))).status == 404
        assert (await read_sse(client, _url(gateway, thread_id, run_id, "internal"), auth("acme-public"))).status == 403
        assert (await read_sse(client, _url(gateway, thread_id, "no-such-run-" + run_id), auth("acme-public"))).status == 404


async def test_a_live_run_streams_as_it_arrives_with_keep_alives_while_quiet(spawn_worker: Any, gateway: GatewayProcess, primed_group: Any) -> None:
    worker = spawn_worker()
    worker.wait_assigned()
    run_id, thread_id = _ids("gw-live")
    lines = CAPTURE.read_text().splitlines()
    async with httpx.AsyncClient(timeout=60) as client:
        reading = asyncio.create_task(read_sse(client, _url(gateway, thread_id, run_id, "internal"), auth("acme-internal")))
        await _publish(primed_group.kafka_bootstrap_servers, run_id, thread_id, lines, pause_after=5, pause=3.0)
        seen = await asyncio.wait_for(reading, 60)
    assert seen.events == _offline(run_id, thread_id)
    assert seen.comments >= 1  # the 3 s pause with RW_GATEWAY_KEEPALIVE_S=1


async def test_a_client_that_disconnects_mid_run_is_released_and_others_are_served(spawn_worker: Any, gateway: GatewayProcess, primed_group: Any) -> None:
    worker = spawn_worker()
    worker.wait_assigned()
    run_id, thread_id = _ids("gw-drop")
    lines = CAPTURE.read_text().splitlines()
    publishing = asyncio.create_task(_publish(primed_group.kafka_bootstrap_servers, run_id, thread_id, lines, pause_after=4, pause=6.0))
    async with httpx.AsyncClient(timeout=60) as client:
        partial = await read_sse(client, _url(gateway, thread_id, run_id, "internal"), auth("acme-internal"), limit=2)
        assert len(partial.events) == 2
        for _ in range(50):
            if gateway.health()["clients"] == 0:
                break
            await asyncio.sleep(0.1)
        assert gateway.health()["clients"] == 0  # the gone client holds nothing
        await publishing
        whole = await read_sse(client, _url(gateway, thread_id, run_id, "internal"), auth("acme-internal"))
    assert whole.events == _offline(run_id, thread_id)


async def test_http_ingress_publishes_records_as_the_chunked_body_arrives(spawn_worker: Any, gateway: GatewayProcess, primed_group: Any) -> None:
    worker = spawn_worker()
    worker.wait_assigned()
    run_id, thread_id = _ids("gw-http-ingest")
    lines = CAPTURE.read_text().splitlines()
    seen_mid_body: list[int] = []

    async def body() -> Any:
        for line in lines[:3]:
            yield f"event: x\ndata: {line}\n\n".encode()
        seen_mid_body.append(len(await _raw_values(primed_group.kafka_bootstrap_servers, run_id, 3)))
        for line in lines[3:]:
            yield f"data: {line}\n".encode()[:10]
            yield f"data: {line}\n".encode()[10:] + b"\n"

    headers = {**auth("acme-public"), "RW-Run-Id": run_id, "RW-Thread-Id": thread_id, "RW-Model": "claude-opus-4-5"}
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(f"{gateway.url}/v1/ingest/anthropic-messages", content=body(), headers=headers)
        assert response.status_code == 200, response.text
        assert response.json() == {"run_id": run_id, "thread_id": thread_id, "published": len(lines), "outcome": "end"}
        assert seen_mid_body == [3]  # out before the body ended
        events = await read_sse(client, _url(gateway, thread_id, run_id, "internal"), auth("acme-internal"))
        assert events.events == _offline(run_id, thread_id)
        no_key = await client.post(f"{gateway.url}/v1/ingest/anthropic-messages", content=b"", headers={"RW-Run-Id": run_id})
        assert no_key.status_code == 401


async def test_http_ingress_takes_ollama_ndjson_and_the_issuer_provider_header(gateway: GatewayProcess, primed_group: Any) -> None:
    """Ollama's /api/chat NDJSON is one event per line over HTTP too, and ``RW-Issuer-Provider``
    rides every raw record as ``rw-issuer-provider``; a value outside the id grammar is a 400
    before anything is published."""
    run_id, thread_id = _ids("gw-ndjson")
    ndjson = (CAPTURE.parents[1] / "openai-chat-completions" / "h_ollama_ndjson.jsonl").read_bytes()
    headers = {**auth("acme-public"), "RW-Run-Id": run_id, "RW-Thread-Id": thread_id, "RW-Issuer-Provider": "ollama:qwen3:8b"}
    url = f"{gateway.url}/v1/ingest/openai-chat-completions"
    async with httpx.AsyncClient(timeout=60) as client:
        bad = await client.post(url, content=ndjson, headers={**headers, "RW-Issuer-Provider": "not a provider"})
        assert bad.status_code == 400 and "issuer provider" in bad.text
        response = await client.post(url, content=ndjson, headers=headers)
        assert response.status_code == 200, response.text
        assert response.json()["published"] == len(ndjson.splitlines())
    records = await _raw_messages(primed_group.kafka_bootstrap_servers, run_id, len(ndjson.splitlines()) + 1)
    assert [m.value for m in records if m.value is not None] == ndjson.splitlines()
    assert all(dict(m.headers).get("rw-issuer-provider") == b"ollama:qwen3:8b" for m in records)


async def _raw_values(bootstrap: str, run_id: str, count: int) -> list[bytes]:
    return [m.value for m in await _raw_messages(bootstrap, run_id, count)]


async def _raw_messages(bootstrap: str, run_id: str, count: int) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()  # noqa: SLF001
        parts = [TopicPartition(topics.RAW, p) for p in consumer.partitions_for_topic(topics.RAW) or ()]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        found: list[Any] = []
        for _ in range(60):
            for batch in (await consumer.getmany(timeout_ms=300)).values():
                found += [m for m in batch if m.key == run_id.encode()]
            if len(found) >= count:
                break
        return found
    finally:
        await consumer.stop()


async def test_the_partition_the_gateway_reads_is_the_one_the_worker_wrote_the_run_to(spawn_worker: Any, primed_group: Any) -> None:
    """Fan-out: murmur2(run id) picks one partition; the gateway reads only that one."""
    from reasonwire.workers.services.gateway.fanout import partition_for

    worker = spawn_worker()
    worker.wait_assigned()
    runs = [_ids("gw-part") for _ in range(8)]
    for run_id, thread_id in runs:
        await _publish(primed_group.kafka_bootstrap_servers, run_id, thread_id, CAPTURE.read_text().splitlines()[:3])
    wanted = {run_id.encode() for run_id, _ in runs}
    consumer = AIOKafkaConsumer(topics.EVENTS, topics.EVENTS_PUBLIC, bootstrap_servers=primed_group.kafka_bootstrap_servers, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    seen: dict[tuple[str, bytes], set[int]] = {}
    try:
        for _ in range(120):
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for m in records:
                    if m.key in wanted:
                        seen.setdefault((m.topic, m.key), set()).add(m.partition)
            if len(seen) == 2 * len(runs):
                break
        counts = {t: len(consumer.partitions_for_topic(t) or ()) for t in (topics.EVENTS, topics.EVENTS_PUBLIC)}
    finally:
        await consumer.stop()
    assert len(seen) == 2 * len(runs)
    assert len({p for parts in seen.values() for p in parts}) > 1  # the runs are spread, not all on one
    for (topic, key), partitions in seen.items():
        assert partitions == {partition_for(key.decode(), counts[topic])}


async def test_post_agent_refuses_without_a_key_a_bad_body_and_an_ungranted_audience_threads_are_per_tenant(gateway: GatewayProcess, primed_group: Any) -> None:
    run_id, thread_id = _ids("gw-agent-refusals")
    body = {"threadId": thread_id, "runId": run_id, "messages": [{"id": "u1", "role": "user", "content": "hi"}], "state": {}, "tools": [], "context": [], "forwardedProps": {}}
    async with httpx.AsyncClient(timeout=60) as client:
        agent = f"{gateway.url}/v1/agent"
        assert (await client.post(agent, json=body)).status_code == 401
        bad = await client.post(agent, json={"threadId": thread_id}, headers=auth("acme-public"))
        assert bad.status_code == 422 and "RunAgentInput" in bad.json()["error"]
        assert (await client.post(agent, content=b"{not json", headers=auth("acme-public"))).status_code == 400
        assert (await client.post(agent + "?audience=internal", json=body, headers=auth("acme-public"))).status_code == 403
        # acme's thread from now on (no agent service runs here: the stream ends with RUN_ERROR after the timeout)
        async with client.stream("POST", agent, json=body, headers=auth("acme-public")) as response:
            assert response.status_code == 200
            text = (await response.aread()).decode()
        assert '"type":"RUN_ERROR"' in text and "agent_timeout" in text
        async with client.stream("POST", agent, json={**body, "runId": run_id + "-2"}, headers=auth("globex-key")) as other:
            assert other.status_code == 200  # threads are per tenant; globex's thread of this id is its own


async def test_post_agent_publishes_a_versioned_run_request_keyed_by_thread(gateway: GatewayProcess, primed_group: Any) -> None:
    from reasonwire.contracts.run_request import RunRequest

    run_id, thread_id = _ids("gw-agent-request")
    body = {"threadId": thread_id, "runId": run_id, "messages": [{"id": "u1", "role": "user", "content": "hi"}], "state": {}, "tools": [], "context": [], "forwardedProps": {"x": 1}}
    consumer = AIOKafkaConsumer(topics.REQUESTS, bootstrap_servers=primed_group.kafka_bootstrap_servers, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            async with client.stream("POST", f"{gateway.url}/v1/agent", json=body, headers=auth("acme-internal")) as response:
                assert response.status_code == 200
                found = None
                for _ in range(60):
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        found = next((m for m in records if m.key == thread_id.encode()), found)
                    if found:
                        break
    finally:
        await consumer.stop()
    assert found is not None
    request = RunRequest.model_validate_json(found.value)
    assert (request.schema_, request.tenant, request.thread_id, request.run_id, request.audience) == ("reasonwire.run.request.v1", "acme", thread_id, run_id, "public")
    assert request.input == body  # the client's RunAgentInput, untouched


async def test_http_ingress_aborts_the_run_when_the_body_is_cut_off(gateway: GatewayProcess, primed_group: Any) -> None:
    """A producer that drops mid-body: what arrived is published, then abort (the run ends interrupted)."""
    run_id, thread_id = _ids("gw-http-cut")
    lines = CAPTURE.read_text().splitlines()

    async def body() -> Any:
        for line in lines[:3]:
            yield f"data: {line}\n\n".encode()
        await asyncio.sleep(0.5)
        raise ConnectionResetError("producer dropped")

    headers = {**auth("acme-public"), "RW-Run-Id": run_id, "RW-Thread-Id": thread_id}
    async with httpx.AsyncClient(timeout=30) as client:
        with pytest.raises((ConnectionResetError, httpx.HTTPError)):
            await client.post(f"{gateway.url}/v1/ingest/anthropic-messages", content=body(), headers=headers)
    consumer = AIOKafkaConsumer(bootstrap_servers=primed_group.kafka_bootstrap_servers, group_id=None)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()  # noqa: SLF001
        parts = [TopicPartition(topics.RAW, p) for p in consumer.partitions_for_topic(topics.RAW) or ()]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        found: list[Any] = []
        for _ in range(60):
            for batch in (await consumer.getmany(timeout_ms=300)).values():
                found += [m for m in batch if m.key == run_id.encode()]
            if found and dict(found[-1].headers).get("rw-control"):
                break
    finally:
        await consumer.stop()
    assert [m.value for m in found[:-1]] == [line.encode() for line in lines[:3]]
    assert dict(found[-1].headers)["rw-control"] == b"abort"


def test_gateway_with_an_unreachable_broker_says_so_in_one_line_without_a_traceback() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "RW_GATEWAY_KEYS": '{"keys": []}'}
    done = subprocess.run([sys.executable, "-m", "reasonwire.workers.cli", "gateway", "--port", "1"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3  # README: a service unreachable
    assert done.stderr.splitlines() == ["reasonwire: error: cannot reach the Kafka broker at 127.0.0.1:1 (KAFKA_BOOTSTRAP_SERVERS): connection refused"]
