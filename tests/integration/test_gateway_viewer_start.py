"""The viewer shows a run whose beginning is older than the gateway's lookback point.

Why the viewer sometimes stayed at "streaming…" with no reasoning while the run had ended
``RUN_FINISHED``: a partition reader starts ``RW_GATEWAY_LOOKBACK_S`` back in its partition, and
a run that began before that point (or was evicted by ``RW_GATEWAY_MAX_RUNS`` and met again) was
*found* from its later events — so the request got its 200 and the page said "streaming…" — but
its events are served from seq 0 in order, and seq 0 was never read: every event, the terminal
one included, stayed held behind the gap, and the page showed keep-alives for ever. The reader
now reads such a run's beginning back from the topic. Headless Chromium (Debian's, through
playwright-core) on a real gateway and broker.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from reasonwire.contracts import topics
from tests.conformance.oracle import translate_file
from tests.integration.gateway_support import GatewayProcess, read_sse, auth
from tests.integration.test_gateway_e2e import NODE_DIR, node  # noqa: F401 - fixture

pytestmark = pytest.mark.integration

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"
LOOKBACK_S = 600


async def _put_run_across_the_lookback(bootstrap: str, run_id: str, thread_id: str, events: list[dict[str, Any]], split: int) -> None:
    """The run's events as the worker writes them, the first ``split`` timestamped an hour before
    now (older than the lookback point), the rest now."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        old = int((time.time() - 3600) * 1000)
        for seq, event in enumerate(events):
            headers = [("rw-run-id", run_id.encode()), ("rw-thread-id", thread_id.encode()), ("rw-tenant", b"acme"), ("rw-event-seq", str(seq).encode())]
            await (await producer.send(topics.EVENTS, orjson.dumps(event), key=run_id.encode(), headers=headers, timestamp_ms=old if seq < split else None))
    finally:
        await producer.stop()


def test_the_viewer_shows_a_run_that_began_before_the_gateways_lookback_point(node: str, primed_group: Any, tmp_path: Path) -> None:  # noqa: F811
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium not installed: the viewer test needs Debian's chromium (apt-get install -y chromium; make e2e-deps)")
    run_id, thread_id = f"run-old-{uuid.uuid4().hex[:8]}", f"thread-old-{uuid.uuid4().hex[:8]}"
    offline = translate_file("anthropic-messages", CAPTURE, run_id=run_id, thread_id=thread_id).events
    reasoning_starts = [i for i, e in enumerate(offline) if e["type"] == "REASONING_MESSAGE_CONTENT"]
    split = reasoning_starts[-1] + 1  # every reasoning delta is older than the lookback point
    asyncio.run(_put_run_across_the_lookback(primed_group.kafka_bootstrap_servers, run_id, thread_id, offline, split))
    gw = GatewayProcess(primed_group, tmp_path / "gateway.log", extra_env={"RW_GATEWAY_LOOKBACK_S": str(LOOKBACK_S)})
    try:
        url = f"{gw.url}/v1/viewer?thread={thread_id}&run={run_id}&audience=internal#key=acme-internal"
        shot = tmp_path / "viewer.png"
        browser = subprocess.run(
            [node, "viewer_screenshot.mjs", json.dumps({"url": url, "chromium": chromium, "screenshot": str(shot), "timeout": 30_000})],
            cwd=NODE_DIR, capture_output=True, text=True, timeout=120,
        )
        assert browser.returncode == 0, f"the page never showed the run's end: {browser.stderr[-1500:]}"
        page = json.loads(browser.stdout)
        assert page["status"] == "run finished"
        shown = "".join(page["reasoning"])
        assert shown == "".join(e["delta"] for e in offline if e["type"] == "REASONING_MESSAGE_CONTENT")
        assert page["answer"].strip()

        async def whole() -> Any:
            import httpx

            async with httpx.AsyncClient(timeout=30) as client:
                return await read_sse(client, f"{gw.url}/v1/threads/{thread_id}/runs/{run_id}/events?audience=internal", auth("acme-internal"))

        seen = asyncio.run(whole())
        assert seen.events == offline and seen.ids == list(range(len(offline)))
    finally:
        gw.stop()
