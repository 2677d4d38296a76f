"""deploy/compose.yaml does what deploy/README.md and docs/telemetry.md say: the worker exports
traces and metrics over OTLP/gRPC to the stack's collector, which has a pipeline for each."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from reasonwire.workers.ops.telemetry import exporters_from_env

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def load(name: str) -> Any:
    return yaml.safe_load((DEPLOY / name).read_text())


@pytest.fixture
def worker_env() -> dict[str, str]:
    return {k: str(v) for k, v in load("compose.yaml")["services"]["worker"]["environment"].items()}


def test_worker_names_an_otlp_exporter_for_traces_and_metrics(worker_env: dict[str, str]) -> None:
    """Unset means no export (docs/telemetry.md), so compose must name them."""
    assert worker_env["OTEL_TRACES_EXPORTER"] == "otlp"
    assert worker_env["OTEL_METRICS_EXPORTER"].split(",") == ["otlp", "prometheus"]  # and /metrics (issue 23 item 6)
    assert worker_env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"


def test_endpoint_is_the_collectors_grpc_receiver(worker_env: dict[str, str]) -> None:
    compose = load("compose.yaml")
    endpoint = urlparse(worker_env["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert endpoint.hostname in compose["services"]
    assert "otel-collector" in compose["services"]["worker"]["depends_on"]
    grpc = load("otel-collector.yaml")["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert endpoint.port == int(grpc.rsplit(":", 1)[1])


def test_collector_has_a_traces_and_a_metrics_pipeline_from_otlp() -> None:
    pipelines = load("otel-collector.yaml")["service"]["pipelines"]
    for signal in ("traces", "metrics"):
        assert "otlp" in pipelines[signal]["receivers"] and pipelines[signal]["exporters"]


def test_the_worker_code_builds_grpc_otlp_exporters_from_that_environment(worker_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The same reading the worker does at start (setup_telemetry → exporters_from_env)."""
    for name, value in worker_env.items():
        monkeypatch.setenv(name, value)  # the OTLP exporters read their endpoint from the process env
    spans = list(exporters_from_env("traces", worker_env))
    metrics = list(exporters_from_env("metrics", worker_env))
    assert [type(e).__module__ for e in spans] == ["opentelemetry.exporter.otlp.proto.grpc.trace_exporter"]
    assert [type(e).__module__ for e in metrics] == ["opentelemetry.exporter.otlp.proto.grpc.metric_exporter"]
    for exporter in spans + metrics:
        exporter.shutdown()


def test_worker_image_copies_every_file_the_build_reads() -> None:
    """`pip install .` in the image reads the readme and the licence files pyproject names."""
    import tomllib

    project = tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())["project"]
    needed = {project["readme"], *project["license-files"], "pyproject.toml"}
    copied = set()
    for line in (DEPLOY / "worker.Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            copied.update(line.split()[1:-1])
    assert needed <= copied


def test_item2_compose_creates_the_topics_in_an_init_step_the_worker_waits_for() -> None:
    """Issue 23 item 2: a one-shot `reasonwire topics apply` with the worker's image and partitions;
    the worker starts only once it completed successfully (no crash loop on a first `up`)."""
    services = load("compose.yaml")["services"]
    topics, worker = services["topics"], services["worker"]
    assert topics["command"] == ["reasonwire", "topics", "apply"]
    assert topics["image"] == worker["image"] and topics["build"] == worker["build"]
    assert topics["restart"] == "no"
    assert worker["depends_on"]["topics"] == {"condition": "service_completed_successfully"}
    assert topics["depends_on"]["kafka"] == {"condition": "service_healthy"}
    assert topics["environment"]["KAFKA_BOOTSTRAP_SERVERS"] == worker["environment"]["KAFKA_BOOTSTRAP_SERVERS"]
    assert topics["environment"]["RW_PARTITIONS"] == worker["environment"]["RW_PARTITIONS"]
    assert worker["environment"].get("RW_CREATE_TOPICS", "false") == "false"
