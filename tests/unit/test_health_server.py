"""The worker's health port on Starlette + uvicorn: the liveness and readiness probes, plus
``/metrics`` and the not-ready wait for missing topics. No services needed."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from reasonwire.workers.ops.health import NO_METRICS, HealthServer
from reasonwire.workers.ops.telemetry import exporters_from_env, setup_telemetry
from reasonwire.workers.io.topics_admin import TopicsMissing, wait_for_topics


async def _get(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        return await client.get(path)


async def test_metrics_route_serves_the_prometheus_text_of_the_telemetry() -> None:
    telemetry = setup_telemetry(install_global=False, env={"OTEL_METRICS_EXPORTER": "prometheus"})
    telemetry.counter("reasonwire.records", unit="{record}", description="d").add(2, {"reasonwire.record.outcome": "translated"})

    async def ready() -> dict[str, Any]:
        return {"ready": True}

    server = HealthServer(ready, host="127.0.0.1", port=0, metrics=telemetry.scrape)
    await server.start()
    try:
        response = await _get(server.port, "/metrics")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert 'reasonwire_records_total{' in response.text and 'reasonwire_record_outcome="translated"' in response.text
        assert (await _get(server.port, "/healthz")).json() == {"status": "alive"}
        assert (await _get(server.port, "/readyz")).status_code == 200
    finally:
        await server.stop()
    with pytest.raises(httpx.ConnectError):
        await _get(server.port, "/healthz")  # stopped: the port is closed


async def test_without_a_prometheus_reader_metrics_is_a_404_that_says_how() -> None:
    async def ready() -> dict[str, Any]:
        return {"ready": True}

    telemetry = setup_telemetry(install_global=False, env={})
    server = HealthServer(ready, host="127.0.0.1", port=0, metrics=telemetry.scrape)
    await server.start()
    try:
        response = await _get(server.port, "/metrics")
        assert response.status_code == 404 and response.json() == {"error": NO_METRICS}
        assert (await _get(server.port, "/nope")).status_code == 404
    finally:
        await server.stop()


def test_prometheus_is_a_pull_reader_beside_otlp_not_a_pushing_exporter() -> None:
    """``otlp,prometheus``: OTLP still pushes (one exporter), and /metrics has a registry."""
    env = {"OTEL_METRICS_EXPORTER": "otlp,prometheus", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}
    exporters = list(exporters_from_env("metrics", env))
    assert [type(e).__name__ for e in exporters] == ["OTLPMetricExporter"]
    for exporter in exporters:
        exporter.shutdown()
    assert setup_telemetry(install_global=False, env={"OTEL_METRICS_EXPORTER": "prometheus"}).scrape() is not None
    assert setup_telemetry(install_global=False, env={}).scrape() is None


def test_health_server_runs_on_uvicorn_and_the_docstring_says_it_is_a_dependency() -> None:
    import reasonwire.workers.ops.health as health

    assert "uvicorn, not a dependency" not in (health.__doc__ or "")
    assert "asyncio.start_server" not in open(health.__file__).read()  # the hand-written HTTP/1.0 server is gone


async def test_missing_topics_report_not_ready_and_wait_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    probed: list[int] = []

    async def ready() -> dict[str, Any]:
        probed.append(1)
        return {"ready": True}

    server = HealthServer(ready, host="127.0.0.1", port=0)
    await server.start()
    calls: list[int] = []
    seen: list[httpx.Response] = []

    async def ensure() -> str:
        calls.append(1)
        if len(calls) < 4:
            if len(calls) == 3:
                seen.append(await _get(server.port, "/readyz"))
            raise TopicsMissing(["reasoning.raw.v1"])
        return "topics"

    try:
        with caplog.at_level(logging.INFO, logger="reasonwire.health"):
            assert await asyncio.wait_for(wait_for_topics(ensure, server, interval_s=0.01), 5) == "topics"
        after = await _get(server.port, "/readyz")
    finally:
        await server.stop()
    [while_waiting] = seen
    assert while_waiting.status_code == 503 and while_waiting.json() == {"ready": False, "topics_missing": ["reasoning.raw.v1"]}
    assert after.status_code == 200 and len(probed) == 1  # the probe was not asked while waiting
    waiting = [r for r in caplog.records if "missing Kafka topics" in r.getMessage()]
    assert len(waiting) == 1 and waiting[0].levelno == logging.WARNING and "reasonwire topics apply" in waiting[0].getMessage()
    assert any("topics are there" in r.getMessage() for r in caplog.records)


async def test_the_health_server_leaves_the_process_signal_handlers_to_faststream() -> None:
    """uvicorn's own ``serve()`` takes SIGTERM / SIGINT over while it runs; the worker's drain
    on SIGTERM is FastStream's, so the health server must not touch them."""
    import signal

    async def ready() -> dict[str, Any]:
        return {"ready": True}

    def mine(signum: int, frame: Any) -> None:
        raise AssertionError("not sent in this test")

    previous = signal.signal(signal.SIGTERM, mine)
    server = HealthServer(ready, host="127.0.0.1", port=0)
    try:
        await server.start()
        assert (await _get(server.port, "/healthz")).status_code == 200
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        await server.stop()
        signal.signal(signal.SIGTERM, previous)
