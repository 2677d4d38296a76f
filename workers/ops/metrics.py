"""Prometheus ``/metrics`` for the worker and the gateway, beside OTLP.

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
the API's no-op one. The gateway's ``/metrics`` is always served: its request histogram costs
one record per HTTP request, everything else is counted as plain integers and observed at
scrape time (:class:`GatewayMetrics`).

The text format is ``prometheus_client``'s; deploy/grafana/reasonwire.json graphs it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus' text exposition format (what ``prometheus_client.generate_latest`` writes)."""


HTTP_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
"""The OpenTelemetry HTTP semantic conventions' advised boundaries for ``http.server.request.duration``."""


@dataclass
class GatewayCounts:
    """What the gateway counts on its request path (plain integers: the instruments read them at
    scrape time), by the labels they are scraped with."""

    ingest_records: Counter[str] = field(default_factory=Counter)
    """Provider events published by ``POST /v1/ingest``, by grammar."""
    ingest_bytes: Counter[str] = field(default_factory=Counter)
    """Body bytes received by ``POST /v1/ingest``, by grammar."""
    ingest_refusals: Counter[str] = field(default_factory=Counter)
    """Ingest requests refused, by reason (:data:`REFUSALS`)."""
    resumed: int = 0
    """Event streams asked with ``Last-Event-ID`` (a reader resuming)."""
    sent_bytes: int = 0
    """Bytes written to event-stream readers."""


REFUSALS = ("unauthenticated", "bad_request", "unknown_grammar", "not_this_grammar", "malformed_event", "too_large", "unavailable", "body_cut")
"""Why an ingest was refused (``reasonwire.ingest.refusal``): a fixed set, so the label stays bounded."""


class GatewayMetrics:
    """The gateway's ``/metrics`` (docs/operations.md, "Metrics"):

    * RED by the OpenTelemetry HTTP semantic conventions — ``http.server.request.duration``
      (s, histogram: ``http.request.method``, ``http.route``, ``http.response.status_code``; an
      event stream's request lasts until its response ends) and ``http.server.active_requests``
      (``http.request.method``, ``url.scheme``), recorded by :class:`RequestMetrics`;
    * ``reasonwire.gateway.clients`` (gauge) — SSE clients connected now; ``.streams`` — event
      streams served, ``.streams.resumed`` — of them asked with ``Last-Event-ID``,
      ``.streams.dropped`` — readers cut off for stalling, ``.sent`` (By) — bytes written to them;
    * ``reasonwire.gateway.ingest.records`` / ``.ingest.size`` (By) by ``gen_ai.provider.name``
      (the grammar) and ``reasonwire.gateway.ingest.refusals`` by ``reasonwire.ingest.refusal``;
    * ``reasonwire.gateway.readers`` (gauge) — fan-out readers of the event topics.

    Everything but the HTTP histogram is read from the gateway at scrape time."""

    def __init__(self, gateway: Any) -> None:
        from opentelemetry.metrics import CallbackOptions, Observation
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

        from reasonwire.workers.ops.telemetry import prometheus_reader, service_resource

        self.gateway = gateway
        reader, self.registry = prometheus_reader()
        view = View(instrument_name="http.server.request.duration", aggregation=ExplicitBucketHistogramAggregation(HTTP_DURATION_BUCKETS))
        self.provider = MeterProvider(resource=service_resource(service="reasonwire-gateway"), metric_readers=[reader], views=[view])
        meter = self.provider.get_meter("reasonwire")

        def observe(value: Any) -> Any:
            def callback(options: CallbackOptions) -> Iterable[Observation]:
                return [Observation(value())]

            return callback

        def per(label: str, counts: Any, keys: Iterable[str]) -> Any:
            """One series per key from the start (0 until counted): a rate over a counter that
            appears only at its first increment misses that increment."""
            known = tuple(keys)

            def callback(options: CallbackOptions) -> Iterable[Observation]:
                seen = counts()
                return [Observation(seen.get(key, 0), {label: key}) for key in dict.fromkeys([*known, *seen])]

            return callback

        from reasonwire.contracts.grammars import Grammar

        grammars = [g.value for g in Grammar]

        counts = lambda: gateway.counts  # noqa: E731 - read at scrape time
        meter.create_observable_gauge(
            "reasonwire.gateway.clients", callbacks=[observe(lambda: gateway.clients)], unit="{client}",
            description="SSE clients connected to this gateway now",
        )
        meter.create_observable_counter(
            "reasonwire.gateway.streams", callbacks=[observe(lambda: gateway.served)], unit="{stream}",
            description="Event streams this gateway served since it started",
        )
        meter.create_observable_counter(
            "reasonwire.gateway.streams.resumed", callbacks=[observe(lambda: counts().resumed)], unit="{stream}",
            description="Event streams asked with Last-Event-ID (a reader resuming)",
        )
        meter.create_observable_counter(
            "reasonwire.gateway.streams.dropped", callbacks=[observe(lambda: gateway.dropped)], unit="{stream}",
            description="Readers cut off for not reading (RW_GATEWAY_CLIENT_STALL_S)",
        )
        meter.create_observable_counter(
            "reasonwire.gateway.sent", callbacks=[observe(lambda: counts().sent_bytes)], unit="By",
            description="Bytes written to event-stream readers",
        )
        meter.create_observable_counter(
            "reasonwire.gateway.ingest.records", callbacks=[per("gen_ai.provider.name", lambda: counts().ingest_records, grammars)], unit="{record}",
            description="Provider events published by POST /v1/ingest, by grammar",
        )
        meter.create_observable_counter(
            "reasonwire.gateway.ingest.size", callbacks=[per("gen_ai.provider.name", lambda: counts().ingest_bytes, grammars)], unit="By",
            description="Body bytes received by POST /v1/ingest, by grammar",
        )
        meter.create_observable_counter(
            "reasonwire.gateway.ingest.refusals", callbacks=[per("reasonwire.ingest.refusal", lambda: counts().ingest_refusals, REFUSALS)], unit="{request}",
            description="POST /v1/ingest requests refused, by reason",
        )
        meter.create_observable_gauge(
            "reasonwire.gateway.readers", callbacks=[observe(lambda: len(gateway.fanout.readers))], unit="{reader}",
            description="Fan-out readers of the event topics in this gateway",
        )
        self.duration = meter.create_histogram(
            "http.server.request.duration", unit="s", description="Duration of HTTP server requests (an event stream: until its response ended)"
        )
        self.active = meter.create_up_down_counter("http.server.active_requests", unit="{request}", description="Number of active HTTP server requests")

    def scrape(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class RequestMetrics:
    """ASGI middleware: each HTTP request's duration and status by route (the route template,
    ``/v1/ingest/{provider}``, never the path: ids would make every run a series), the requests in
    flight, and — with ``RW_GATEWAY_ACCESS_LOG`` — one access log line per request with its
    duration and bytes, in ``RW_LOG_FORMAT`` (JSON: the fields as keys)."""

    def __init__(self, app: Any, metrics: GatewayMetrics, *, access_log: bool) -> None:
        self.app = app
        self.metrics = metrics
        self.access_log = access_log

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        import time

        method = scope["method"] if scope["method"] in _METHODS else "_OTHER"
        active = {"http.request.method": method, "url.scheme": scope.get("scheme", "http")}
        sent = {"status": 500, "bytes": 0}

        async def counting(message: Any) -> None:
            if message["type"] == "http.response.start":
                sent["status"] = message["status"]
            elif message["type"] == "http.response.body":
                sent["bytes"] += len(message.get("body", b""))
            await send(message)

        started = time.perf_counter()
        self.metrics.active.add(1, active)
        try:
            await self.app(scope, receive, counting)
        finally:
            took = time.perf_counter() - started
            self.metrics.active.add(-1, active)
            route = getattr(scope.get("route"), "path", None)
            attributes = {"http.request.method": method, "http.response.status_code": sent["status"], **({"http.route": route} if route else {})}
            self.metrics.duration.record(took, attributes)
            if self.access_log:
                _log_access(scope, method, route, sent["status"], took, sent["bytes"])


_METHODS = frozenset({"GET", "POST", "OPTIONS", "HEAD", "PUT", "DELETE", "PATCH"})
"""Methods named as themselves; any other is ``_OTHER`` (the semantic conventions' bound)."""


def _log_access(scope: Any, method: str, route: str | None, status: int, took: float, size: int) -> None:
    """One access log line: text ``client "GET /path HTTP/1.1" 200 12.3ms 456B``; JSON the same as
    fields. The path only — never the query string, never a header (a key)."""
    import logging

    client = scope.get("client") or ("-", 0)
    path = scope.get("path", "")
    fields = {
        "client.address": client[0],
        "http.request.method": method,
        "url.path": path,
        "http.route": route,
        "http.response.status_code": status,
        "duration_ms": round(took * 1000, 3),
        "http.response.body.size": size,
    }
    logging.getLogger("reasonwire.gateway.access").info(
        '%s "%s %s HTTP/%s" %d %.1fms %dB', client[0], scope["method"], path, scope.get("http_version", "1.1"), status, took * 1000, size,
        extra={"rw_fields": fields},
    )


async def gateway_metrics(request: Any) -> Any:
    """``GET /metrics`` of the gateway (a Starlette endpoint)."""
    from starlette.responses import Response

    return Response(request.app.state.gateway.metrics.scrape(), media_type=CONTENT_TYPE)
