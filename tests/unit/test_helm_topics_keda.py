"""The chart installs on a cluster as it comes: a topics Job creates the topics
before any worker starts, and KEDA's ScaledObject is rendered only when asked for and only where
the cluster serves KEDA's API. ``helm template`` / ``helm lint`` run for real (helm as in
tests/unit/test_helm.py: on PATH, cached, or built once with Go)."""

from __future__ import annotations

import subprocess
from typing import Any

from tests.unit.test_helm import CHART, KEDA, _by_kind, _container, _render, helm  # noqa: F401 (the fixture)

HOOK = "helm.sh/hook"


def _topics_job(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [job] = _by_kind(docs, "Job", hooks=True).values()
    return job


def test_default_values_render_a_topics_hook_job_with_the_workers_image_and_settings(helm: str) -> None:
    docs = _render(helm, "partitions=12", "config.RW_REPLICATION_FACTOR=3", "kafka.bootstrapServers=k1:9092")
    job = _topics_job(docs)
    assert job["metadata"]["annotations"][HOOK] == "pre-install,pre-upgrade"
    assert "hook-succeeded" in job["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["topics", "apply"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    normalizer = _container(_by_kind(docs, "Deployment")["rw-reasonwire-normalizer"])
    assert container["image"] == normalizer["image"]
    assert container["securityContext"] == normalizer["securityContext"]
    # a pre-install hook runs before the release's ConfigMap and Secret exist: it reads hook
    # copies of them, created first (lower weight), with the same data
    hook_config = _by_kind(docs, "ConfigMap", hooks=True)
    hook_secret = _by_kind(docs, "Secret", hooks=True)
    refs = [next(iter(r.values()))["name"] for r in container["envFrom"]]
    assert refs == [*hook_config, *hook_secret]
    [release_config] = _by_kind(docs, "ConfigMap").values()
    [release_secret] = _by_kind(docs, "Secret").values()
    assert next(iter(hook_config.values()))["data"] == release_config["data"]
    assert next(iter(hook_secret.values()))["stringData"] == release_secret["stringData"]
    data = release_config["data"]
    assert (data["RW_PARTITIONS"], data["RW_REPLICATION_FACTOR"], data["KAFKA_BOOTSTRAP_SERVERS"]) == ("12", "3", "k1:9092")
    assert data["RW_CREATE_TOPICS"] == "false"  # the pods never create topics: the Job does
    for copy in (*hook_config.values(), *hook_secret.values()):
        assert int(copy["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(job["metadata"]["annotations"]["helm.sh/hook-weight"])


def test_topics_job_uses_an_existing_secret_and_the_kafka_tls_mount(helm: str) -> None:
    docs = _render(helm, "secret.existingSecret=mine", "kafka.tlsSecretName=kafka-certs")
    assert not _by_kind(docs, "Secret", hooks=True)
    job = _topics_job(docs)
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert {"secretRef": {"name": "mine"}} in container["envFrom"]
    assert any(m["mountPath"] == "/etc/reasonwire/kafka-tls" for m in container["volumeMounts"])


def test_topics_job_can_be_left_to_the_platform(helm: str) -> None:
    docs = _render(helm, "topics.job.enabled=false")
    assert not [d for d in docs if d["kind"] == "Job"] and not _by_kind(docs, "ConfigMap", hooks=True)


def test_default_values_render_no_scaledobject_and_fixed_replicas(helm: str) -> None:
    """A cluster without KEDA refuses a ScaledObject: none by default, the normalizer has replicas."""
    docs = _render(helm)
    assert not [d for d in docs if d["kind"] == "ScaledObject"]
    assert _by_kind(docs, "Deployment")["rw-reasonwire-normalizer"]["spec"]["replicas"] == 2


def test_keda_enabled_renders_one_scaledobject_where_the_api_is_served(helm: str) -> None:
    docs = _render(helm, *KEDA)
    assert len([d for d in docs if d["kind"] == "ScaledObject"]) == 1
    assert "replicas" not in _by_kind(docs, "Deployment")["rw-reasonwire-normalizer"]["spec"]


def test_keda_enabled_without_its_api_is_refused_with_one_line_saying_why(helm: str) -> None:
    out = subprocess.run([helm, "template", "rw", str(CHART), "--set", KEDA[0]], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "does not serve keda.sh/v1alpha1" in out.stderr and "normalizer.keda.enabled=false" in out.stderr


def test_helm_lint_strict_passes_with_the_job_and_without_it(helm: str) -> None:
    for extra in ((), ("--set", "topics.job.enabled=false"), ("--set", "secret.existingSecret=mine")):
        out = subprocess.run([helm, "lint", "--strict", str(CHART), *extra], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr


def test_pods_are_scraped_at_metrics_and_the_workers_serve_prometheus(helm: str) -> None:
    docs = _render(helm, "gateway.enabled=true", "health.port=9123")
    [config] = _by_kind(docs, "ConfigMap").values()
    assert "prometheus" in config["data"]["OTEL_METRICS_EXPORTER"].split(",")
    ports = {"rw-reasonwire-normalizer": "9123", "rw-reasonwire-replay": "9123", "rw-reasonwire-gateway": "8000"}
    for name, deployment in _by_kind(docs, "Deployment").items():
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert (annotations["prometheus.io/scrape"], annotations["prometheus.io/port"], annotations["prometheus.io/path"]) == ("true", ports[name], "/metrics")
    off = _render(helm, "metrics.enabled=false")
    [config] = _by_kind(off, "ConfigMap").values()
    assert "OTEL_METRICS_EXPORTER" not in config["data"]
    assert all("prometheus.io/scrape" not in d["spec"]["template"]["metadata"]["annotations"] for d in _by_kind(off, "Deployment").values())
