"""Prometheus ``/metrics`` for the worker and the gateway (issue 23 item 6), beside OTLP.

The worker's metrics are its OpenTelemetry instruments (:mod:`reasonwire.workers.ops.telemetry`):
``OTEL_METRICS_EXPORTER=prometheus`` (or ``otlp,prometheus``) adds the OpenTelemetry Prometheus
exporter's pull reader, on a registry of its own, and the health port serves it as
``GET /metrics`` (:mod:`reasonwire.workers.ops.health`). The exporter converts the names as the
OpenTelemetry ↔ Prometheus compatibility rules say: dots become underscores, the unit becomes a
suffix (``s`` → ``_seconds``, ``By`` → ``_bytes``; an annotation such as ``{record}`` is
dropped) and a counter ends in ``_total`` — ``reasonwire.poll.duration`` (s) is scraped as
``reasonwire_poll_duration_seconds_bucket`` / ``_sum`` / ``_count``, ``reasonwire.records`` as
``reasonwire_records_total``. Attribute keys become labels the same way
(``gen_ai.provider.name`` → ``gen_ai_provider_name``).

Why opt in rather than always on: a metric reader makes every poll aggregate data points, which
costs the worker CPU on its hot path (docs/benchmarks.md); with no reader the meter provider is
the API's no-op one. The gateway's metrics are observed at scrape time only (its connected
clients, streams served, fan-out readers), so its ``/metrics`` is always served.

The text format is ``prometheus_client``'s; deploy/grafana/reasonwire.json graphs it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus' text exposition format (what ``prometheus_client.generate_latest`` writes)."""


class GatewayMetrics:
    """The gateway's ``/metrics``: observable instruments read from the gateway at scrape time
    (nothing is added on the request path).

    * ``reasonwire.gateway.clients`` ({client}, gauge) — SSE clients connected now;
    * ``reasonwire.gateway.streams`` ({stream}, counter) — event streams served since start;
    * ``reasonwire.gateway.readers`` ({reader}, gauge) — fan-out readers of the event topics.
    """

    def __init__(self, gateway: Any) -> None:
        from opentelemetry.metrics import CallbackOptions, Observation
        from opentelemetry.sdk.metrics import MeterProvider

        from reasonwire.workers.ops.telemetry import prometheus_reader, service_resource

        self.gateway = gateway
        reader, self.registry = prometheus_reader()
        self.provider = MeterProvider(resource=service_resource(service="reasonwire-gateway"), metric_readers=[reader])
        meter = self.provider.get_meter("reasonwire")

        def observe(value: Any) -> Any:
            def callback(options: CallbackOptions) -> Iterable[Observation]:
                return [Observation(value())]

            return callback

        meter.create_observable_gauge(
            "reasonwire.gateway.clients", callbacks=[observe(lambda: gateway.clients)], unit="{client}",
            description="SSE clients connected to this gateway now",
        )
        meter.create_observable_counter(
            "reasonwire.gateway.streams", callbacks=[observe(lambda: gateway.served)], unit="{stream}",
            description="Event streams this gateway served since it started",
        )
        meter.create_observable_gauge(
            "reasonwire.gateway.readers", callbacks=[observe(lambda: len(gateway.fanout.readers))], unit="{reader}",
            description="Fan-out readers of the event topics in this gateway",
        )

    def scrape(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


async def gateway_metrics(request: Any) -> Any:
    """``GET /metrics`` of the gateway (a Starlette endpoint; its metrics are made at the first scrape)."""
    from starlette.responses import Response

    state = request.app.state
    metrics = getattr(state, "rw_metrics", None)
    if metrics is None:
        metrics = state.rw_metrics = GatewayMetrics(state.gateway)
    return Response(metrics.scrape(), media_type=CONTENT_TYPE)
