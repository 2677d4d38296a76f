"""OpenTelemetry for reasonwire's workers: traces and metrics that never carry content (P8).

Theory of operation
-------------------
:func:`setup_telemetry` builds one :class:`Telemetry` per worker process from
the standard ``OTEL_*`` environment (``OTEL_TRACES_EXPORTER`` /
``OTEL_METRICS_EXPORTER`` = ``none`` | ``console`` | ``otlp`` | any installed
exporter entry point, ``OTEL_EXPORTER_OTLP_*``, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``,
``OTEL_METRIC_EXPORT_INTERVAL``). Unlike the SDK's own auto-configuration, an
unset exporter variable means *no export*. ``prometheus`` among the metrics
exporters (alone or beside ``otlp``: ``otlp,prometheus``) adds a pull reader
whose registry the worker's health port serves as ``GET /metrics``
(:meth:`Telemetry.scrape`), not the SDK's own HTTP server on a second port.
The guards are installed either way:

* every exporting span processor is wrapped in a
  :class:`~reasonwire.workers.ops.telemetry.guard.GuardedSpanProcessor` (allowlisted attributes,
  no foreign span events, no exception text);
* every metric data point keeps only allowlisted attribute keys (an SDK View);
* the log guard redacts registered content from every log record, whichever
  library logs it.

The :class:`~reasonwire.workers.ops.telemetry.registry.OpaqueRegistry` is filled by the
worker's hooks (:mod:`reasonwire.workers.ops.telemetry.normalizer`) with the content it
handles. Tests inject an ``InMemorySpanExporter`` and an ``InMemoryMetricReader``
and keep the providers local (``install_global=False``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import View
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter

from reasonwire.workers.ops.telemetry.guard import ContentGuard, GuardedCounter, GuardedHistogram, GuardedSpanProcessor, LogGuard
from reasonwire.workers.ops.telemetry.registry import OpaqueRegistry
from reasonwire.workers.ops.telemetry.vocabulary import METRIC_ATTRIBUTES, RW_GUARD_SIGNAL

__all__ = ["Telemetry", "setup_telemetry", "OpaqueRegistry"]

DEFAULT_SERVICE_NAME = "reasonwire-worker"
SCOPE = "reasonwire"


@dataclass
class Telemetry:
    """One process's providers, registry and installed guards."""

    registry: OpaqueRegistry
    guard: ContentGuard
    tracer_provider: TracerProvider | trace.NoOpTracerProvider
    meter_provider: MeterProvider | metrics.NoOpMeterProvider
    log_guard: LogGuard
    prometheus: Any = None
    """The ``prometheus_client`` registry of the pull reader (``OTEL_METRICS_EXPORTER`` names
    ``prometheus``), else None: then nothing is served at ``/metrics``."""

    def scrape(self) -> bytes | None:
        """The metrics in Prometheus' text format (names and units converted by the OTel
        Prometheus exporter), or None without a pull reader."""
        if self.prometheus is None:
            return None
        from prometheus_client import generate_latest

        return generate_latest(self.prometheus)

    @property
    def tracing(self) -> bool:
        """Whether any span is exported: without an exporter the worker builds no spans at all."""
        return not isinstance(self.tracer_provider, trace.NoOpTracerProvider)

    @property
    def metering(self) -> bool:
        """Whether any metric reader is installed: without one, data points are not even guarded."""
        return not isinstance(self.meter_provider, metrics.NoOpMeterProvider)

    @property
    def tracer(self) -> trace.Tracer:
        return self.tracer_provider.get_tracer(SCOPE)

    def counter(self, name: str, *, unit: str, description: str) -> GuardedCounter:
        meter = self.meter_provider.get_meter(SCOPE)
        return GuardedCounter(meter.create_counter(name, unit=unit, description=description), self.guard)

    def histogram(self, name: str, *, unit: str, description: str, buckets: Sequence[float] | None = None) -> GuardedHistogram:
        meter = self.meter_provider.get_meter(SCOPE)
        return GuardedHistogram(
            meter.create_histogram(name, unit=unit, description=description, explicit_bucket_boundaries_advisory=buckets), self.guard
        )

    def shutdown(self) -> None:
        """Flush and stop exporting; the log guard stays (late log lines are still redacted)."""
        for provider in (self.tracer_provider, self.meter_provider):
            if hasattr(provider, "shutdown"):  # the no-op providers have nothing to flush
                provider.shutdown()


def setup_telemetry(
    *,
    span_exporter: SpanExporter | None = None,
    metric_reader: MetricReader | None = None,
    env: Mapping[str, str] | None = None,
    install_global: bool = True,
) -> Telemetry:
    """Providers from ``OTEL_*`` (plus the injected exporter / reader), guards on."""
    env = os.environ if env is None else env
    registry = OpaqueRegistry()
    guard = ContentGuard(registry)
    resource = service_resource()

    readers: list[MetricReader] = [PeriodicExportingMetricReader(e) for e in exporters_from_env("metrics", env)]
    if metric_reader is not None:
        readers.append(metric_reader)
    prometheus = None
    if PULL_EXPORTER in _names("metrics", env):
        reader, prometheus = prometheus_reader()
        readers.append(reader)
    # Nothing reads the metrics or exports the spans: no-op providers, so the hot path does not
    # aggregate data points or build spans nobody sees (docs/benchmarks.md: about half of the
    # worker's CPU). The guards below stay on either way.
    meter_provider: Any = (
        MeterProvider(
            resource=resource,
            metric_readers=readers,
            views=[View(instrument_name="*", attribute_keys=set(METRIC_ATTRIBUTES))],
        )
        if readers
        else metrics.NoOpMeterProvider()
    )
    removed = GuardedCounter(
        meter_provider.get_meter(SCOPE).create_counter(
            "reasonwire.guard.removed", unit="{item}", description="Attributes, events, names and log texts the content guard removed"
        ),
        guard,
    )

    def report(signal: str, count: int) -> None:
        removed.add(count, {RW_GUARD_SIGNAL: signal})

    processors = [GuardedSpanProcessor(BatchSpanProcessor(e), guard, report) for e in exporters_from_env("traces", env)]
    if span_exporter is not None:
        processors.append(GuardedSpanProcessor(SimpleSpanProcessor(span_exporter), guard, report))
    tracer_provider: Any = TracerProvider(resource=resource) if processors else trace.NoOpTracerProvider()
    for processor in processors:
        tracer_provider.add_span_processor(processor)

    log_guard = LogGuard(registry, report).install()
    if install_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    return Telemetry(registry, guard, tracer_provider, meter_provider, log_guard, prometheus)


def service_resource(service: str = DEFAULT_SERVICE_NAME) -> Resource:
    """``OTEL_RESOURCE_ATTRIBUTES`` / ``OTEL_SERVICE_NAME``, else ``service`` as the service name."""
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    return resource


def prometheus_reader() -> tuple[Any, Any]:
    """A pull reader on a registry of its own (never the process-global one: each
    :class:`Telemetry` — and each test, and the gateway's ``/metrics``
    (:mod:`reasonwire.workers.ops.metrics`) — scrapes only its own)."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    return PrometheusMetricReader(registry=registry), registry


PULL_EXPORTER = "prometheus"
"""The metrics exporter name that is a pull reader (served at ``/metrics``), not a pushing exporter."""


def _names(signal: str, env: Mapping[str, str]) -> list[str]:
    return [n.strip() for n in env.get(f"OTEL_{signal.upper()}_EXPORTER", "none").split(",") if n.strip()]


def exporters_from_env(signal: str, env: Mapping[str, str]) -> Iterator[Any]:
    """Pushing exporters named by ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` (unset = none;
    ``prometheus`` is the pull reader :func:`setup_telemetry` adds, not one of these)."""
    for name in _names(signal, env):
        if name == "none" or (signal == "metrics" and name == PULL_EXPORTER):
            continue
        found = entry_points(group=f"opentelemetry_{signal}_exporter", name=_otlp_flavour(name, signal, env))
        if not found:
            raise RuntimeError(f"OTEL_{signal.upper()}_EXPORTER names {name!r}, but no such exporter is installed")
        yield next(iter(found)).load()()


def _otlp_flavour(name: str, signal: str, env: Mapping[str, str]) -> str:
    """``otlp`` means gRPC unless ``OTEL_EXPORTER_OTLP[_<SIGNAL>]_PROTOCOL`` says ``http/protobuf``
    (the SDK's own rule)."""
    if name != "otlp":
        return name
    protocol = (env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc").strip()
    return {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}.get(protocol, name)
