"""What a platform team expects of the chart: seccomp RuntimeDefault, a ServiceAccount without a
token, startup probes, replicas spread over nodes and zones, an SSE-safe Ingress for the gateway,
a ServiceMonitor and PrometheusRule alerts on the metrics the workers export (behind values), a
NetworkPolicy, the image by digest, and the gateway's key book through a documented Secret.
``helm template`` / ``helm lint`` run for real (helm as in tests/unit/test_helm.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.unit.test_dashboard import _in_process_scrape, names_in, scraped
from tests.unit.test_helm import CHART, _by_kind, _container, _render, helm  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ("rw-reasonwire-normalizer", "rw-reasonwire-replay", "rw-reasonwire-gateway")
MONITORING = ("metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true")


def _pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every pod spec the release runs: its Deployments' and the topics hook Job's."""
    pods = {name: d["spec"]["template"]["spec"] for name, d in _by_kind(docs, "Deployment").items()}
    pods |= {name: d["spec"]["template"]["spec"] for name, d in _by_kind(docs, "Job", hooks=True).items()}
    return pods


def test_every_pod_runs_under_seccomp_runtime_default_without_a_service_account_token(helm: str) -> None:
    docs = _render(helm, "gateway.enabled=true")
    [account] = _by_kind(docs, "ServiceAccount").values()
    assert account["automountServiceAccountToken"] is False
    pods = _pods(docs)
    assert set(WORKLOADS) | {"rw-reasonwire-topics"} == set(pods)
    for name, pod in pods.items():
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["securityContext"]["runAsNonRoot"] is True
    for name in WORKLOADS:
        assert pods[name]["serviceAccountName"] == account["metadata"]["name"]
    # a pre-install hook runs before the release's ServiceAccount exists: the Job names none of it
    assert "serviceAccountName" not in pods["rw-reasonwire-topics"]
    existing = _pods(_render(helm, "serviceAccount.create=false", "serviceAccount.name=platform-sa"))
    assert {p["serviceAccountName"] for p in existing.values()} == {"platform-sa"}


def test_every_workload_has_a_startup_probe_before_liveness(helm: str) -> None:
    docs = _render(helm, "gateway.enabled=true", "startupProbe.failureThreshold=90")
    for name in WORKLOADS:
        c = _container(_by_kind(docs, "Deployment")[name])
        assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": c["livenessProbe"]["httpGet"]["port"]}, name
        assert c["startupProbe"]["failureThreshold"] == 90


def test_replicas_spread_over_nodes_and_zones_by_their_own_component(helm: str) -> None:
    docs = _render(helm, "gateway.enabled=true")
    for name in WORKLOADS:
        deployment = _by_kind(docs, "Deployment")[name]
        spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert {s["topologyKey"] for s in spread} == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
        for s in spread:
            assert s["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    off = _render(helm, "topologySpread.enabled=false")
    assert all("topologySpreadConstraints" not in pod for pod in _pods(off).values())


def test_gateway_ingress_keeps_sse_streams_unbuffered_with_a_long_read_timeout(helm: str) -> None:
    assert not _by_kind(_render(helm, "gateway.enabled=true"), "Ingress")  # off by default
    docs = _render(helm, "gateway.enabled=true", "gateway.ingress.enabled=true", "gateway.ingress.className=nginx", "gateway.ingress.hosts[0].host=rw.example.org", "gateway.ingress.hosts[0].paths[0]=/")
    [ingress] = _by_kind(docs, "Ingress").values()
    notes = ingress["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert notes["nginx.ingress.kubernetes.io/proxy-request-buffering"] == "off"  # ingest bodies stream in too
    assert int(notes["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    assert ingress["spec"]["ingressClassName"] == "nginx"
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] == "rw.example.org"
    [path] = rule["http"]["paths"]
    service = _by_kind(docs, "Service")[path["backend"]["service"]["name"]]
    assert path["backend"]["service"]["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}


def test_service_monitor_scrapes_the_workers_and_the_gateway_behind_a_flag(helm: str) -> None:
    assert not [d for d in _render(helm) if d["kind"] in ("ServiceMonitor", "PrometheusRule")]
    docs = _render(helm, "gateway.enabled=true", *MONITORING, "metrics.serviceMonitor.labels.release=kps")
    [monitor] = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert monitor["metadata"]["labels"]["release"] == "kps"
    selected = [s for s in _by_kind(docs, "Service").values() if all(s["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())]
    ports = {p["name"] for s in selected for p in s["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    assert {e["path"] for e in monitor["spec"]["endpoints"]} == {"/metrics"}
    pods = {name: d["spec"]["template"] for name, d in _by_kind(docs, "Deployment").items()}
    for name, template in pods.items():  # every workload is behind a selected Service's port
        named = {p["name"] for p in _container({"spec": {"template": template}})["ports"]}
        assert any(set(s["spec"]["selector"].items()) <= set(template["metadata"]["labels"].items()) and named & {p["targetPort"] for p in s["spec"]["ports"]} for s in selected), name


def test_prometheus_rule_alerts_on_lag_dead_letters_the_store_and_readiness(helm: str) -> None:
    docs = _render(helm, *MONITORING, "metrics.prometheusRule.consumerLag.threshold=5000")
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == {"ReasonwireConsumerLag", "ReasonwireDeadLetters", "ReasonwireStoreRefused", "ReasonwireNotReady"}
    assert "reasonwire_consumer_lag" in alerts["ReasonwireConsumerLag"]["expr"] and "> 5000" in alerts["ReasonwireConsumerLag"]["expr"]
    assert "reasonwire_dlq_records_total" in alerts["ReasonwireDeadLetters"]["expr"]
    assert "kube_pod_status_ready" in alerts["ReasonwireNotReady"]["expr"]
    for alert in alerts.values():
        assert alert["labels"]["severity"] in ("warning", "critical") and alert["annotations"]["summary"]


def test_the_alerts_name_only_metrics_and_labels_the_workers_export(helm: str) -> None:
    """The same check as the dashboard's (tests/unit/test_dashboard.py): every reasonwire metric and
    label an alert reads is in a scrape of the instruments, given one data point each."""
    from reasonwire.workers.core.backoff import ServiceFailure
    from reasonwire.workers.ops.health import HealthMetrics
    from reasonwire.workers.ops.telemetry import setup_telemetry

    telemetry = setup_telemetry(install_global=False, env={"OTEL_METRICS_EXPORTER": "prometheus"})
    health = HealthMetrics(telemetry)
    health.failed(ServiceFailure("redis", "ConnectionError"))
    health.store_lost.add(1)
    text = (telemetry.scrape() or b"").decode() + _in_process_scrape()
    have_metrics, have_labels = scraped(text)
    [rule] = [d for d in _render(helm, *MONITORING) if d["kind"] == "PrometheusRule"]
    for alert in (r for g in rule["spec"]["groups"] for r in g["rules"]):
        metrics, labels = names_in(alert["expr"])
        ours = {m for m in metrics if not m.startswith("kube_")}
        assert ours <= have_metrics, (alert["alert"], ours - have_metrics)
        if not metrics - ours:
            assert labels - {"namespace", "le"} <= have_labels, (alert["alert"], labels - have_labels)


def test_network_policies_admit_only_the_served_ports(helm: str) -> None:
    assert not _by_kind(_render(helm, "gateway.enabled=true"), "NetworkPolicy")
    docs = _render(helm, "gateway.enabled=true", "networkPolicy.enabled=true", "health.port=9123")
    policies = _by_kind(docs, "NetworkPolicy")
    deployments = _by_kind(docs, "Deployment")
    assert set(policies) == set(deployments)
    for name, policy in policies.items():
        assert policy["spec"]["podSelector"]["matchLabels"] == deployments[name]["spec"]["selector"]["matchLabels"]
        [rule] = policy["spec"]["ingress"]
        assert [p["port"] for p in rule["ports"]] == [8000 if name.endswith("gateway") else 9123]
        assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress left open unless rules are given
    egress = _by_kind(_render(helm, "networkPolicy.enabled=true", "networkPolicy.egress[0].ports[0].port=9092"), "NetworkPolicy")
    for policy in egress.values():
        assert "Egress" in policy["spec"]["policyTypes"]
        ports = [p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports", [])]
        assert 53 in ports and 9092 in ports


def test_image_by_digest(helm: str) -> None:
    digest = "sha256:" + "ab" * 32
    docs = _render(helm, "gateway.enabled=true", f"image.digest={digest}", "image.tag=ignored")
    for name, pod in _pods(docs).items():
        [container] = pod["containers"]
        assert container["image"] == f"reasonwire@{digest}", name
    tagged = _render(helm, "image.tag=1.2.3")
    assert _container(_by_kind(tagged, "Deployment")["rw-reasonwire-normalizer"])["image"] == "reasonwire:1.2.3"


def test_gateway_keys_come_from_a_secret_mounted_as_the_key_book_file(helm: str, tmp_path: Path) -> None:
    book = json.dumps({"keys": [{"sha256": "0" * 64, "tenant": "acme", "audiences": ["public"]}]})
    (tmp_path / "keys.json").write_text(book)
    docs = _render(helm, "gateway.enabled=true", f"--set-file=gateway.keys.keyBook={tmp_path / 'keys.json'}")
    gateway = _by_kind(docs, "Deployment")["rw-reasonwire-gateway"]
    c = _container(gateway)
    [path] = [e["value"] for e in c["env"] if e["name"] == "RW_GATEWAY_KEYS_FILE"]
    [mount] = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    [volume] = [v for v in gateway["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    secret = _by_kind(docs, "Secret")[volume["secret"]["secretName"]]
    [item] = volume["secret"]["items"]
    assert path.endswith("/" + item["path"]) and json.loads(secret["stringData"][item["key"]]) == json.loads(book)
    mine = _render(helm, "gateway.enabled=true", "gateway.keys.existingSecret=platform-keys", "gateway.keys.secretKey=book")
    gateway = _by_kind(mine, "Deployment")["rw-reasonwire-gateway"]
    [volume] = [v for v in gateway["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "platform-keys" and volume["secret"]["items"][0]["key"] == "book"
    assert "rw-reasonwire-gateway-keys" not in _by_kind(mine, "Secret")
    # the workers never see the key book
    for name in ("rw-reasonwire-normalizer", "rw-reasonwire-replay"):
        assert all(v["name"] != mount["name"] for v in _by_kind(mine, "Deployment")[name]["spec"]["template"]["spec"]["volumes"])


def test_the_key_book_secret_is_documented_in_values_and_operations() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert {"existingSecret", "secretKey", "keyBook"} <= set(values["gateway"]["keys"])
    ops = (ROOT / "docs" / "operations.md").read_text()
    assert "gateway.keys.existingSecret" in ops and "gateway.keys.keyBook" in ops


K8S = "1.33"
"""The Kubernetes version the rendered objects are validated against (kubernetes-validate's schemas)."""
CUSTOM = {"ServiceMonitor", "PrometheusRule", "ScaledObject"}
"""Custom resources: their operators' CRDs, which no Kubernetes schema bundle has; the tests above read them."""


def test_every_rendered_object_is_valid_against_the_kubernetes_schema(helm: str) -> None:
    """Strict: an unknown or misplaced field fails, as `kubectl apply --validate=strict` would."""
    import kubernetes_validate

    everything = (*MONITORING, "gateway.enabled=true", "gateway.ingress.enabled=true", "networkPolicy.enabled=true", "networkPolicy.egress[0].ports[0].port=9092", "gateway.keys.keyBook=book", "image.digest=sha256:" + "ef" * 32)
    for sets in ((), everything, ("serviceAccount.create=false", "topologySpread.enabled=false", "kafka.tlsSecretName=certs")):
        docs = _render(helm, *sets)
        for doc in docs:
            if doc["kind"] not in CUSTOM:
                kubernetes_validate.validate(doc, K8S, strict=True)
        assert {d["kind"] for d in docs} >= {"Deployment", "Job", "ConfigMap", "PodDisruptionBudget"}
    broken = _by_kind(_render(helm), "Deployment")["rw-reasonwire-normalizer"]
    broken["spec"]["template"]["spec"]["startupProbe"] = _container(broken)["startupProbe"]  # on the pod, not the container
    try:
        kubernetes_validate.validate(broken, K8S, strict=True)
    except kubernetes_validate.ValidationError:
        pass
    else:
        raise AssertionError("strict validation let an unknown field through")


def test_helm_lint_strict_passes_with_every_platform_option_on(helm: str) -> None:
    sets = [*MONITORING, "gateway.enabled=true", "gateway.ingress.enabled=true", "networkPolicy.enabled=true", "image.digest=sha256:" + "cd" * 32, "gateway.keys.keyBook={}"]
    args = [a for s in sets for a in ("--set", s)]
    out = subprocess.run([helm, "lint", "--strict", str(CHART), *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
