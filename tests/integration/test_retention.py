"""Retention on the real worker, Kafka and Redis: per-tenant TTL, thread erase, public stream (P7, P8)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from reasonwire.contracts.store import artefact_key, thread_index_key
from tests.conformance.oracle import LOCAL_FIXTURES, assert_valid_stream
from tests.integration.conftest import ROOT, Collector, send
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.io.sse import read_events

pytestmark = pytest.mark.integration

FIXTURE = LOCAL_FIXTURES / "anthropic-messages" / "b_reasoning_then_tool_call.jsonl"


async def test_tenant_ttl_public_stream_and_erase(spawn_worker: Any, producer: Any, redis: Any, primed_group: Any, tmp_path: Path, services: dict[str, str]) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"tenants": {"short": {"opaque_state": {"store": True, "ttl_s": 120}}}}))
    worker = spawn_worker({"RW_POLICY_FILE": str(policy)})
    worker.wait_assigned()
    runs = {tenant: RunEnvelope("anthropic-messages", f"ret-{tenant}-{uuid.uuid4().hex[:6]}", f"thread-{uuid.uuid4().hex[:6]}", tenant=tenant) for tenant in ("short", "default")}
    for run in runs.values():
        with FIXTURE.open() as f:
            await send(producer, list(raw_records(run, read_events(f))))
    async with Collector(primed_group.kafka_bootstrap_servers) as c:
        await c.until(lambda c: all(c.finished(r.run_id) and len(c.public.get(r.run_id, {})) > 0 and c.public[r.run_id].get(max(c.public[r.run_id]), [{}])[0].get("type") == "RUN_FINISHED" for r in runs.values()))

    # P7: each tenant's opaque state lives as long as its policy says
    ttls = {}
    for tenant, run in runs.items():
        [slot] = [e.decode() for e in await redis.lrange(thread_index_key(tenant, run.thread_id), 0, -1)]
        ttls[tenant] = await redis.ttl(artefact_key(tenant, run.thread_id, slot))
    assert 0 < ttls["short"] <= 120
    assert 120 < ttls["default"] <= 7 * 24 * 3600

    # P8: the public stream is valid AG-UI without encrypted values
    for run in runs.values():
        public = [c.public[run.run_id][seq][0] for seq in sorted(c.public[run.run_id])]
        assert_valid_stream(public)
        assert not any(e["type"] == "REASONING_ENCRYPTED_VALUE" for e in public)
        assert any(e["type"] == "REASONING_MESSAGE_CONTENT" for e in public)  # summaries stay visible

    # P7: erase removes a thread's stored state and says what it removed
    run = runs["short"]
    done = subprocess.run(
        [sys.executable, "-m", "reasonwire.workers.cli", "erase", "--tenant", "short", "--thread", run.thread_id],
        capture_output=True, text=True, cwd=ROOT, env={"REDIS_URL": services["REDIS_URL"], "PATH": "/usr/bin:/bin"}, check=True,
    )
    report = json.loads(done.stdout)
    assert len(report["removed_artefacts"]) == 1 and report["removed_journals"] == []  # the run had ended
    assert await redis.exists(thread_index_key("short", run.thread_id)) == 0
    assert await redis.exists(thread_index_key("default", runs["default"].thread_id)) == 1  # other tenants untouched
