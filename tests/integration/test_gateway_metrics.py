"""The gateway's RED metrics and access log on a real gateway (docs/operations.md, "Metrics"):
``http.server.request.duration`` by method, route and status, active requests, ingest records,
bytes and refusals, SSE readers resumed and bytes sent — scraped before and after real requests;
JSON access log lines with their duration under ``RW_LOG_FORMAT=json``, and no plain line."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.gateway_support import GatewayProcess, auth, read_sse
from tests.integration.test_metrics_scrape import scrape, total, until
from tests.unit.test_dashboard import expressions, names_in, scraped

pytestmark = pytest.mark.integration

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"
GATEWAY_PANELS = ("http_server", "reasonwire_gateway")


async def test_gateway_red_metrics_ingest_and_reader_counters_move_and_the_access_log_is_json(spawn_worker: Any, primed_group: Any, tmp_path: Path) -> None:
    worker = spawn_worker()
    worker.wait_assigned()
    gw = GatewayProcess(primed_group, tmp_path / "gateway.log", extra_env={"RW_LOG_FORMAT": "json", "RW_GATEWAY_ACCESS_LOG": "true"})
    try:
        before = scrape(gw.url)
        run_id, thread_id = f"red-{uuid.uuid4().hex[:8]}", f"thread-{uuid.uuid4().hex[:8]}"
        body = CAPTURE.read_bytes()
        async with httpx.AsyncClient(timeout=60) as client:
            ok = await client.post(f"{gw.url}/v1/ingest/anthropic-messages", content=body, headers={**auth("acme-internal"), "RW-Run-Id": run_id, "RW-Thread-Id": thread_id})
            assert ok.status_code == 200
            bad = await client.post(f"{gw.url}/v1/ingest/anthropic-messages", content=b"not json\n", headers={**auth("acme-internal"), "RW-Run-Id": f"bad-{run_id}"})
            assert bad.status_code == 400
            url = f"{gw.url}/v1/threads/{thread_id}/runs/{run_id}/events?audience=internal"
            whole = await read_sse(client, url, auth("acme-internal"))
            resumed = await read_sse(client, url, {**auth("acme-internal"), "Last-Event-ID": "3"})
            assert whole.status == resumed.status == 200 and resumed.ids[0] == 4
        def settled() -> str | None:  # a stream's request is recorded once its response has ended
            text = scrape(gw.url)
            return text if total(text, "http_server_request_duration_seconds_count", http_route="/v1/threads/{thread_id}/runs/{run_id}/events") >= 2 else None

        after = until(settled)
        assert after, scrape(gw.url)
    finally:
        gw.stop()

    published = ok.json()["published"]
    provider = {"gen_ai_provider_name": "anthropic-messages"}
    assert total(after, "reasonwire_gateway_ingest_records_total", **provider) - total(before, "reasonwire_gateway_ingest_records_total", **provider) == published
    assert total(after, "reasonwire_gateway_ingest_size_bytes_total", **provider) - total(before, "reasonwire_gateway_ingest_size_bytes_total", **provider) == len(body) + len(b"not json\n")
    assert total(after, "reasonwire_gateway_ingest_refusals_total", reasonwire_ingest_refusal="malformed_event") == 1
    route = {"http_route": "/v1/ingest/{provider}", "http_request_method": "POST"}
    assert total(after, "http_server_request_duration_seconds_count", http_response_status_code="200", **route) == 1
    assert total(after, "http_server_request_duration_seconds_count", http_response_status_code="400", **route) == 1
    events = {"http_route": "/v1/threads/{thread_id}/runs/{run_id}/events", "http_response_status_code": "200"}
    assert total(after, "http_server_request_duration_seconds_count", **events) == 2
    assert total(after, "http_server_request_duration_seconds_sum", **events) > 0
    assert run_id not in after  # a route template, never an id: one series per route
    assert "http_server_active_requests{" in after
    assert total(after, "reasonwire_gateway_streams_resumed_total") == 1
    assert total(after, "reasonwire_gateway_sent_bytes_total") > len(body)

    # every dashboard query over the gateway's metrics names only what this scrape has
    have_metrics, have_labels = scraped(after)
    for expr in expressions():
        metrics, labels = names_in(expr)
        if any(m.startswith(GATEWAY_PANELS) for m in metrics):
            assert metrics <= have_metrics and labels - {"le"} <= have_labels, expr

    lines = gw.log.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line is JSON: the banner too
    assert any(r["message"].startswith("reasonwire gateway on http://") for r in records)
    access = [r for r in records if r["logger"] == "reasonwire.gateway.access"]
    ingest = [r for r in access if r["http.route"] == "/v1/ingest/{provider}"]
    assert [r["http.response.status_code"] for r in ingest] == [200, 400]
    assert all(r["duration_ms"] > 0 and r["http.request.method"] == "POST" for r in ingest)
    assert all("authorization" not in json.dumps(r).lower() and "acme-internal" not in json.dumps(r) for r in access)
