"""Thread and run ids are per tenant (docs/gateway.md, "Tenancy and audiences"): two tenants may
use the same thread id and the same run id, each ingest is accepted, and neither tenant ever sees
the other's events or stored artefacts. HTTP ingest, the real worker, Redis and gateway."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from reasonwire.workers.io.redis_connect import connect
from reasonwire.workers.io.store import ArtefactStore
from tests.conformance.oracle import translate_file
from tests.integration.gateway_support import GatewayProcess, auth, gateway, read_sse  # noqa: F401 - fixture

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ACME = FIXTURES / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"
GLOBEX = FIXTURES / "anthropic-messages" / "a_reasoning_then_answer.jsonl"


async def _artefacts(redis_url: str, tenant: str, thread_id: str) -> list[Any]:
    store = ArtefactStore(connect(redis_url), artefact_ttl_s=3600, journal_ttl_s=3600)
    try:
        return await store.thread_artefacts(tenant, thread_id)
    finally:
        await store.aclose()


async def test_two_tenants_with_the_same_thread_and_run_ids_each_see_only_their_own_run(spawn_worker: Any, gateway: GatewayProcess, primed_group: Any) -> None:
    worker = spawn_worker()
    worker.wait_assigned()
    thread_id, run_id = f"shared-thread-{uuid.uuid4().hex[:8]}", f"shared-run-{uuid.uuid4().hex[:8]}"
    ids = {"RW-Run-Id": run_id, "RW-Thread-Id": thread_id}
    url = f"{gateway.url}/v1/threads/{thread_id}/runs/{run_id}/events?audience=internal"
    async with httpx.AsyncClient(timeout=60) as client:
        for key, capture in (("acme-internal", ACME), ("globex-key", GLOBEX)):
            answer = await client.post(f"{gateway.url}/v1/ingest/anthropic-messages", content=capture.read_bytes(), headers={**auth(key), **ids})
            assert answer.status_code == 200, answer.text  # the other tenant's use of the ids is neither an obstacle nor revealed
        acme = await read_sse(client, url, auth("acme-internal"))
        globex = await read_sse(client, url, auth("globex-key"))
    assert acme.status == globex.status == 200
    assert acme.events == translate_file("anthropic-messages", ACME, run_id=run_id, thread_id=thread_id).events
    assert globex.events == translate_file("anthropic-messages", GLOBEX, run_id=run_id, thread_id=thread_id).events
    acme_stored = await _artefacts(primed_group.redis_url, "acme", thread_id)
    globex_stored = await _artefacts(primed_group.redis_url, "globex", thread_id)
    assert acme_stored and globex_stored
    assert not {a.value for a in acme_stored} & {a.value for a in globex_stored}
    assert {a.value for a in acme_stored} == {a.value for a in translate_file("anthropic-messages", ACME, run_id=run_id, thread_id=thread_id).artefacts}
