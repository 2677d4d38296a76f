"""deploy/compose.yaml runs the whole product and configures it only with variables the product
reads: the broker creates no topic of its own, a one-shot `reasonwire topics apply` creates the
plan's, then the normalizer, the replay worker and the gateway start; Prometheus and Grafana
(profile ``metrics``) scrape and show them with the shipped dashboard; the workers export
traces and metrics over OTLP/gRPC to the stack's collector. No Docker engine is needed: the
file is read, not run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import opentelemetry.environment_variables as otel_api_env
import opentelemetry.sdk.environment_variables as otel_sdk_env
import pytest
import yaml

from reasonwire.workers.ops.settings import (
    GatewaySettings,
    NormalizeSettings,
    ReplayWorkerSettings,
    Settings,
    TopicPlanSettings,
    TopicsApplySettings,
)
from reasonwire.workers.ops.telemetry import exporters_from_env

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
IMAGE = "reasonwire:local"
COMMANDS: dict[tuple[str, ...], tuple[type[Settings], bool]] = {
    ("topics", "apply"): (TopicsApplySettings, False),
    ("worker", "normalize"): (NormalizeSettings, True),
    ("worker", "replay"): (ReplayWorkerSettings, True),
    ("gateway",): (GatewaySettings, False),
}
"""Each command compose runs (the arguments of the image's ``reasonwire`` entrypoint) → the
settings class it reads, and whether it reads ``OTEL_*`` (the workers set up telemetry from
them; the gateway and ``topics`` do not)."""
OURS = re.compile(r"^(RW_|KAFKA_|REDIS_|OTEL_)")
OTEL_NAMES = {v for module in (otel_api_env, otel_sdk_env) for k, v in vars(module).items() if k.startswith("OTEL_") and isinstance(v, str)}
"""OpenTelemetry's own variables (the API's and the SDK's declared names)."""


def load(name: str) -> Any:
    return yaml.safe_load((DEPLOY / name).read_text())


def interpolated(value: object) -> str:
    """``value`` as compose passes it with nothing set in the shell: ``${X:-d}`` → ``d``, ``${X}`` → empty."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}", lambda m: m[1] or "", str(value))


def product_services() -> dict[str, dict[str, Any]]:
    """The services that run the reasonwire image, by name."""
    return {name: s for name, s in load("compose.yaml")["services"].items() if s.get("image") == IMAGE}


@pytest.fixture
def worker_env() -> dict[str, str]:
    return {k: str(v) for k, v in load("compose.yaml")["services"]["normalizer"]["environment"].items()}


def test_compose_runs_the_broker_redis_topics_init_normalizer_replay_worker_and_gateway() -> None:
    services = load("compose.yaml")["services"]
    assert {"kafka", "redis", "topics", "normalizer", "replay", "gateway"} <= set(services)
    commands = {name: tuple(s["command"]) for name, s in product_services().items()}
    assert sorted(commands.values()) == sorted(COMMANDS)  # each command once, none unknown
    for name, service in product_services().items():
        assert service["build"] == services["topics"]["build"], name  # one image, built from the repo root
        if name != "topics":
            assert service["depends_on"]["topics"] == {"condition": "service_completed_successfully"}, name
            assert service["restart"] == "unless-stopped"


def test_the_broker_creates_no_topic_of_another_shape_than_the_plan() -> None:
    """A producer that writes first once got reasoning.raw.v1 with the broker's default shape: auto
    creation is off, or its default partition count is the plan's."""
    broker = {k: str(v) for k, v in load("compose.yaml")["services"]["kafka"]["environment"].items()}
    plan = str(product_services()["topics"]["environment"].get("RW_PARTITIONS", TopicPlanSettings().partitions))
    assert broker.get("KAFKA_AUTO_CREATE_TOPICS_ENABLE") == "false" or broker.get("KAFKA_NUM_PARTITIONS") == plan
    assert broker.get("KAFKA_NUM_PARTITIONS") == plan


@pytest.mark.parametrize("name", ["topics", "normalizer", "replay", "gateway"])
def test_every_variable_compose_sets_is_one_the_command_reads_with_a_valid_value(name: str) -> None:
    """RW_*, KAFKA_*, REDIS_* against the settings model of the service's command (a variable it
    does not read would change nothing: a mistake), OTEL_* against OpenTelemetry's own names and
    only for the workers; then the values validate as the command would at start."""
    service = product_services()[name]
    cls, reads_otel = COMMANDS[tuple(service["command"])]
    env = {k: interpolated(v) for k, v in (service.get("environment") or {}).items()}
    known = set(cls.env_names().values())
    unknown = [k for k in env if OURS.match(k) and k not in known and not (reads_otel and k in OTEL_NAMES)]
    assert unknown == [], f"{name}: variables {cls.__name__} does not read"
    cls.from_env(env)  # a ConfigurationError names the bad variable


def test_the_model_check_catches_a_variable_no_command_reads() -> None:
    """The check above can fail: a misspelt variable, and an OTEL_* one on the gateway."""
    known = set(GatewaySettings.env_names().values())
    assert "RW_GATEWAY_KEY" not in known and "RW_GATEWAY_KEYS" in known
    assert "OTEL_SERVICE_NAME" in OTEL_NAMES and "OTEL_SERVICE_NAMES" not in OTEL_NAMES


def test_services_share_the_brokers_and_the_plans_partitions() -> None:
    services = product_services()
    for name, service in services.items():
        assert service["environment"]["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:19092", name
        assert str(service["environment"]["RW_PARTITIONS"]) == str(services["topics"]["environment"]["RW_PARTITIONS"]), name
        assert service["environment"].get("RW_CREATE_TOPICS", "false") == "false", name  # the init step does


def test_prometheus_and_grafana_are_an_optional_profile_with_the_shipped_dashboard() -> None:
    services = load("compose.yaml")["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["metrics"]
    assert not any("profiles" in services[n] for n in product_services())  # the product always runs
    scraped = {t for job in load("prometheus.yml")["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    ports = {"normalizer": "8080", "replay": "8080", "gateway": "8000"}
    assert scraped == {f"{n}:{p}" for n, p in ports.items()}
    for name in ("normalizer", "replay"):
        env = services[name]["environment"]
        assert "prometheus" in env["OTEL_METRICS_EXPORTER"].split(",") and str(env["RW_HEALTH_PORT"]) == ports[name]
    mounts = [m.split(":")[:2] for m in services["grafana"]["volumes"]]
    assert ["./grafana/reasonwire.json", "/var/lib/grafana/dashboards/reasonwire.json"] in mounts
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/reasonwire.yaml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    [source] = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yaml").read_text())["datasources"]
    assert urlparse(source["url"]).hostname == "prometheus" and source["type"] == "prometheus"


def test_worker_names_an_otlp_exporter_for_traces_and_metrics(worker_env: dict[str, str]) -> None:
    """Unset means no export (docs/telemetry.md), so compose must name them."""
    assert worker_env["OTEL_TRACES_EXPORTER"] == "otlp"
    assert worker_env["OTEL_METRICS_EXPORTER"].split(",") == ["otlp", "prometheus"]  # and /metrics
    assert worker_env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"


def test_endpoint_is_the_collectors_grpc_receiver(worker_env: dict[str, str]) -> None:
    compose = load("compose.yaml")
    endpoint = urlparse(worker_env["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert endpoint.hostname in compose["services"]
    assert "otel-collector" in compose["services"]["normalizer"]["depends_on"]
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


def test_telemetry_doc_states_the_exporters_compose_sets(worker_env: dict[str, str]) -> None:
    text = " ".join((DEPLOY.parent / "docs" / "telemetry.md").read_text().split())
    assert f"`OTEL_METRICS_EXPORTER={worker_env['OTEL_METRICS_EXPORTER']}`" in text
    assert f"`OTEL_TRACES_EXPORTER={worker_env['OTEL_TRACES_EXPORTER']}`" in text


def test_compose_creates_the_topics_in_an_init_step_that_runs_once_the_broker_is_healthy() -> None:
    """A one-shot `reasonwire topics apply` with the workers' image and partitions; they start only
    once it completed successfully (no crash loop on a first `up`)."""
    services = load("compose.yaml")["services"]
    topics = services["topics"]
    assert topics["restart"] == "no"
    assert topics["depends_on"]["kafka"] == {"condition": "service_healthy"}
