"""The gateway while Kafka (then Redis) is away: a bounded wait then 503 with
``Retry-After``, ``/readyz`` false, a few log lines — and serving again when the broker is back.

A private real broker and Redis (``deploy/services.sh`` on spare ports and a state dir of this
test, through the chaos harness's :class:`~chaos.services.Services`), so stopping the broker
touches nothing the other tests use. Only processes this test started are signalled.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx
import pytest

from chaos.services import Services
from reasonwire.contracts.topic_plan import plan
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.topics_admin import apply
from tests.integration.gateway_support import GatewayProcess, auth

pytestmark = pytest.mark.integration

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"
PUBLISH_TIMEOUT_S = 3
ANSWER_BOUND_S = 2 * PUBLISH_TIMEOUT_S + 2
"""docs/gateway.md: an ingest during an outage is answered within twice RW_GATEWAY_PUBLISH_TIMEOUT_S."""


def test_ingest_during_a_broker_outage_is_a_503_within_the_bound_and_readyz_is_false(private_services: Services, tmp_path: Path) -> None:
    settings = WorkerSettings(kafka_bootstrap_servers=private_services.bootstrap, redis_url=private_services.redis_url, partitions=2)
    asyncio.run(apply(private_services.bootstrap, plan(2, 1), create=True))
    gw = GatewayProcess(settings, tmp_path / "gateway.log", extra_env={"RW_CREATE_TOPICS": "true", "RW_GATEWAY_PUBLISH_TIMEOUT_S": str(PUBLISH_TIMEOUT_S)})
    try:
        ready = httpx.get(gw.url + "/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["ready"] is True
        private_services.kafka_stop()
        log_before = gw.log.stat().st_size
        stopped = time.monotonic()
        headers = {**auth("acme-public"), "RW-Run-Id": f"outage-{uuid.uuid4().hex[:8]}"}
        answers = []
        for _ in range(3):  # at once after the stop (the probe has not noticed yet), and later
            started = time.monotonic()
            answer = httpx.post(gw.url + "/v1/ingest/anthropic-messages", content=CAPTURE.read_bytes(), headers=headers, timeout=60)
            answers.append((answer, time.monotonic() - started))
            time.sleep(2)
        for answer, took in answers:
            assert answer.status_code == 503, answer.text
            assert answer.headers["retry-after"].isdigit()
            assert took < ANSWER_BOUND_S, took
        deadline = time.monotonic() + 15
        while (readyz := httpx.get(gw.url + "/readyz", timeout=10)).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert readyz.status_code == 503 and readyz.json()["kafka"] is False
        assert httpx.get(gw.url + "/healthz", timeout=10).json()["ok"] is True  # alive, not ready
        time.sleep(max(0.0, 20 - (time.monotonic() - stopped)))  # a 20 s outage: long enough for unthrottled reconnect logging to show
        logged = gw.log.stat().st_size - log_before
        assert logged < 10_240, f"{logged} bytes of log in a 20 s broker outage"
        print(gw.log.read_text(errors="replace")[-3000:])  # what an operator sees (pytest -s)
        private_services.redis_stop("save")
        deadline = time.monotonic() + 15
        while (readyz := httpx.get(gw.url + "/readyz", timeout=10)).json()["redis"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert readyz.status_code == 503 and readyz.json()["redis"] is False

        # services.sh waits for "Kafka Server started" in server.log, which still holds the first
        # start's line: a restart may then see the new broker's port open before its pid check
        # ("is not the one on …"). This test's own state dir: start the restarted broker's log afresh.
        (private_services.state / "kafka" / "logs" / "server.log").unlink(missing_ok=True)
        try:
            private_services.up()  # both back: ready again within the probes' backoff cap, and serving
        except Exception:
            print(private_services.log.read_text(errors="replace")[-3000:])
            raise
        deadline = time.monotonic() + 60
        while httpx.get(gw.url + "/readyz", timeout=10).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert httpx.get(gw.url + "/readyz", timeout=10).json()["ready"] is True
        headers = {**auth("acme-public"), "RW-Run-Id": f"after-{uuid.uuid4().hex[:8]}"}
        answer = httpx.post(gw.url + "/v1/ingest/anthropic-messages", content=CAPTURE.read_bytes(), headers=headers, timeout=60)
        assert answer.status_code == 200 and answer.json()["outcome"] == "end", answer.text
        assert "recovered after" in gw.log.read_text(errors="replace")
    finally:
        gw.stop()
