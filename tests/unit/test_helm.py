"""The Helm chart (deploy/helm/reasonwire): ``helm lint`` and
``helm template`` run for real, and the assertions read the rendered manifests.

helm is a Go module: where it is not on PATH (nor cached), the test builds it once with
``go install helm.sh/helm/v3/cmd/helm@v3.21.4`` into ``~/.cache/reasonwire/bin/helm-v3.21.4``
(a few minutes on two cores, then cached; the file is named for its version, so changing
HELM_VERSION builds the new one). Only where Go itself is absent is the test skipped, with a
message that says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "reasonwire"
HELM_VERSION = "v3.21.4"  # the Go proxy serves v3.22.0, but it is not an approved release
CACHE_BIN = Path(os.environ.get("RW_CACHE", Path.home() / ".cache" / "reasonwire")) / "bin"


def _helm() -> str:
    """helm on PATH, else the cached build, else build it with Go; skip only without Go."""
    cached = CACHE_BIN / f"helm-{HELM_VERSION}"
    for candidate in (shutil.which("helm"), cached):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        pytest.skip(f"helm is not installed and Go is absent: install Go, or helm {HELM_VERSION}, to run the chart tests")
    CACHE_BIN.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(CACHE_BIN), "GOFLAGS": "-mod=mod"}
    done = subprocess.run([go, "install", f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"], env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"go install helm failed: {done.stderr[-2000:]}"
    (CACHE_BIN / "helm").replace(cached)
    return str(cached)


@pytest.fixture(scope="module")
def helm() -> str:
    return _helm()


KEDA = ("normalizer.keda.enabled=true", "--api-versions=keda.sh/v1alpha1")
"""KEDA on, on a cluster that serves its API (the chart refuses a ScaledObject elsewhere)."""


def _render(helm: str, *sets: str) -> list[dict[str, Any]]:
    """``helm template`` with ``--set`` for each ``a=b``; an item starting with ``--`` is a flag."""
    args = [helm, "template", "rw", str(CHART)]
    for s in sets:
        args += [s] if s.startswith("--") else ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _by_kind(docs: list[dict[str, Any]], kind: str, *, hooks: bool = False) -> dict[str, dict[str, Any]]:
    """The release's resources of ``kind`` by name; ``hooks``: the hook resources (the topics Job's) instead."""
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind and _is_hook(d) == hooks}


def _is_hook(doc: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (doc["metadata"].get("annotations") or {})


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return container


def test_helm_lint_passes(helm: str) -> None:
    out = subprocess.run([helm, "lint", "--strict", str(CHART)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    out = subprocess.run([helm, "lint", "--strict", str(CHART), "--set", "gateway.enabled=true"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_workers_have_probes_on_the_health_port_resources_and_env_from_configmap_and_secret(helm: str) -> None:
    docs = _render(helm, "health.port=9123")
    deployments = _by_kind(docs, "Deployment")
    assert set(deployments) == {"rw-reasonwire-normalizer", "rw-reasonwire-replay"}  # gateway off by default
    [configmap] = _by_kind(docs, "ConfigMap").values()
    [secret] = _by_kind(docs, "Secret").values()
    assert configmap["data"]["RW_HEALTH_PORT"] == "9123"
    assert "REDIS_URL" in secret["stringData"] and "REDIS_URL" not in configmap["data"]  # may carry an ACL password
    for deployment in deployments.values():
        c = _container(deployment)
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports["health"] == 9123
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
        assert c["resources"]["requests"] and c["resources"]["limits"]
        refs = [next(iter(r.values()))["name"] for r in c["envFrom"]]
        assert refs == [configmap["metadata"]["name"], secret["metadata"]["name"]]


def test_grace_period_is_longer_than_a_drain(helm: str) -> None:
    for drain in (30, 90):
        docs = _render(helm, f"drainSeconds={drain}", "gateway.enabled=true")
        for deployment in _by_kind(docs, "Deployment").values():
            assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > drain


def test_keda_scaledobject_scales_the_normalizer_on_lag_capped_at_partitions(helm: str) -> None:
    docs = _render(helm, *KEDA, "partitions=12", "normalizer.groupId=g1", "kafka.bootstrapServers=k1:9092")
    [scaled] = _by_kind(docs, "ScaledObject").values()
    assert scaled["spec"]["scaleTargetRef"]["name"] == "rw-reasonwire-normalizer"
    assert scaled["spec"]["maxReplicaCount"] == 12
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"]["topic"] == "reasoning.raw.v1"
    assert trigger["metadata"]["consumerGroup"] == "g1"
    assert trigger["metadata"]["bootstrapServers"] == "k1:9092"
    assert int(trigger["metadata"]["lagThreshold"]) > 0
    normalizer = _by_kind(docs, "Deployment")["rw-reasonwire-normalizer"]
    assert "replicas" not in normalizer["spec"]  # KEDA owns the count; a fixed one would fight it
    assert {"name": "RW_GROUP_ID", "value": "g1"} in _container(normalizer)["env"]


def test_raw_topic_name_in_chart_matches_contracts(helm: str) -> None:
    from reasonwire.contracts import topics

    [scaled] = _by_kind(_render(helm, *KEDA), "ScaledObject").values()
    assert scaled["spec"]["triggers"][0]["metadata"]["topic"] == topics.RAW


def test_pdbs_select_their_deployments(helm: str) -> None:
    docs = _render(helm, "gateway.enabled=true")
    deployments = _by_kind(docs, "Deployment")
    pdbs = _by_kind(docs, "PodDisruptionBudget")
    assert set(pdbs) == set(deployments)
    for name, pdb in pdbs.items():
        assert pdb["spec"]["minAvailable"] >= 1
        assert pdb["spec"]["selector"]["matchLabels"] == deployments[name]["spec"]["selector"]["matchLabels"]
        assert deployments[name]["spec"]["template"]["metadata"]["labels"] == pdb["spec"]["selector"]["matchLabels"]


def test_gateway_behind_a_switch_with_service(helm: str) -> None:
    docs = _render(helm, "gateway.enabled=true")
    gateway = _by_kind(docs, "Deployment")["rw-reasonwire-gateway"]
    assert _container(gateway)["args"][0] == "gateway"
    assert _container(gateway)["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # ready only while Kafka and Redis answer: /healthz stays 200 through an outage
    assert _container(gateway)["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "rw-reasonwire-gateway" in _by_kind(docs, "Service")


def test_existing_secret_and_tls_mount(helm: str) -> None:
    docs = _render(helm, "secret.existingSecret=mine", "kafka.tlsSecretName=kafka-certs", "kafka.securityProtocol=SASL_SSL", "kafka.saslMechanism=SCRAM-SHA-512")
    assert not _by_kind(docs, "Secret")  # the chart does not render a Secret it was told exists
    [configmap] = _by_kind(docs, "ConfigMap").values()
    assert configmap["data"]["KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert configmap["data"]["KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert configmap["data"]["KAFKA_SSL_CAFILE"].startswith("/etc/reasonwire/kafka-tls/")
    for deployment in _by_kind(docs, "Deployment").values():
        c = _container(deployment)
        assert {"secretRef": {"name": "mine"}} in c["envFrom"]
        assert any(m["mountPath"] == "/etc/reasonwire/kafka-tls" for m in c["volumeMounts"])
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        assert volumes["kafka-tls"]["secret"]["secretName"] == "kafka-certs"


def test_min_replicas_above_partitions_is_refused(helm: str) -> None:
    out = subprocess.run([helm, "template", "rw", str(CHART), "--set", "partitions=2", "--set", "normalizer.keda.minReplicaCount=3", *KEDA[1:], "--set", KEDA[0]], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "larger than partitions" in out.stderr
