"""Prometheus ``/metrics`` of a real worker and a real gateway.

A real ``reasonwire worker normalize`` process (``OTEL_METRICS_EXPORTER=otlp,prometheus``: OTLP
still configured, the health port serves the scrape) and a real ``reasonwire gateway``, on real
Kafka and Redis: each is scraped before and after records flow — a run with reasoning and a
record without an envelope (a dead letter) through the worker, a client stream through the
gateway — and the counters move. The Grafana dashboard's every query is then checked against
those two scrapes (tests/unit/test_dashboard.py parses the names).
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from reasonwire.contracts import topics
from reasonwire.workers.services.ingress.publisher import Publisher
from tests.integration.conftest import Collector
from tests.integration.gateway_support import GatewayProcess, auth, free_port, gateway, read_sse  # noqa: F401 - fixture
from tests.unit.test_dashboard import unknown_names

pytestmark = pytest.mark.integration

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"


def scrape(url: str) -> str:
    response = httpx.get(url + "/metrics", timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return response.text


def total(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    out = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                out += float(line.rsplit(" ", 1)[1])
    return out


def until(check: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


async def test_worker_and_gateway_metrics_move_when_records_flow_and_the_dashboard_names_only_scraped_metrics(
    spawn_worker: Any, gateway: GatewayProcess, primed_group: Any, producer: Any
) -> None:
    health = free_port()
    worker = spawn_worker({
        "RW_HEALTH_PORT": str(health),
        "OTEL_METRICS_EXPORTER": "otlp,prometheus",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",  # OTLP beside it, to nowhere: the scrape does not depend on it
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",
    })
    worker.wait_assigned()
    worker_url = f"http://127.0.0.1:{health}"
    before, gw_before = scrape(worker_url), scrape(gateway.url)
    assert total(before, "reasonwire_runs_ended_total") == 0
    assert "reasonwire_gateway_clients" in gw_before and total(gw_before, "reasonwire_gateway_streams_total") == 0

    run_id, thread_id = f"metrics-{uuid.uuid4().hex[:8]}", f"thread-{uuid.uuid4().hex[:8]}"
    async with Publisher(primed_group.kafka_bootstrap_servers) as publisher:
        async with publisher.run(provider="anthropic-messages", run_id=run_id, thread_id=thread_id, tenant="acme", model="claude-opus-4-5") as run:
            for line in CAPTURE.read_text().splitlines():
                await run.send(line)
    bad_key = f"no-headers-{uuid.uuid4().hex[:8]}".encode()
    await producer.send_and_wait(topics.RAW, b"not an envelope", key=bad_key)  # a dead letter: invalid_envelope
    async with Collector(primed_group.kafka_bootstrap_servers) as c:
        await c.until(lambda c: c.finished(run_id) and any(key == bad_key for key, _, _ in c.dlq), timeout=60)
    async with httpx.AsyncClient(timeout=60) as client:
        seen = await read_sse(client, f"{gateway.url}/v1/threads/{thread_id}/runs/{run_id}/events", auth("acme-public"))
    assert seen.status == 200 and seen.events

    # the worker hands its summed counts to the SDK about once a second (metric_flush_s); the
    # group is the session's, so records other tests left uncommitted may be counted here too
    def moved() -> str | None:
        text = scrape(worker_url)
        ended = total(text, "reasonwire_runs_ended_total", reasonwire_run_outcome="finished", gen_ai_provider_name="anthropic")
        return text if ended >= 1 and total(text, "reasonwire_dlq_records_total", reasonwire_dlq_code="invalid_envelope") >= 1 else None

    after = until(moved)
    assert after, scrape(worker_url)
    gw_after = scrape(gateway.url)

    anthropic = {"gen_ai_provider_name": "anthropic"}
    assert total(after, "reasonwire_records_total", reasonwire_record_outcome="translated", **anthropic) > total(before, "reasonwire_records_total", reasonwire_record_outcome="translated", **anthropic)
    assert total(after, "reasonwire_runs_ended_total", reasonwire_run_outcome="finished", **anthropic) >= 1
    assert total(after, "reasonwire_dlq_records_total", reasonwire_dlq_code="invalid_envelope") >= 1
    assert total(after, "reasonwire_usage_tokens_total", reasonwire_token_type="reasoning", **anthropic) > 0
    assert total(after, "reasonwire_usage_tokens_total", reasonwire_token_type="answer", **anthropic) > 0
    assert total(after, "reasonwire_run_time_to_first_reasoning_seconds_count", **anthropic) >= 1
    assert total(after, "reasonwire_run_time_to_first_text_seconds_count", **anthropic) >= 1
    assert re.search(r'gen_ai_response_model="[^"]+"', after)
    assert total(after, "reasonwire_poll_duration_seconds_count") > total(before, "reasonwire_poll_duration_seconds_count")
    assert "reasonwire_consumer_lag{" in after
    assert total(gw_after, "reasonwire_gateway_streams_total") == total(gw_before, "reasonwire_gateway_streams_total") + 1
    assert "reasonwire_gateway_clients" in gw_after

    # the dashboard's queries name only metrics and labels these two scrapes have
    assert unknown_names(after + gw_after) == []
