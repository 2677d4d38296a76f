"""deploy/grafana/reasonwire.json graphs only metrics the code records.

Every PromQL expression of the dashboard is parsed for its metric names and label names;
here they are checked against a scrape of the instruments the worker and the gateway create
(one data point each, in process); tests/integration/test_metrics_scrape.py checks them against
the ``/metrics`` of a real worker and a real gateway after records flowed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "reasonwire.json"

_PROMQL_WORDS = frozenset({
    "sum", "avg", "min", "max", "count", "rate", "irate", "increase", "histogram_quantile", "by", "without", "on",
    "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool", "topk", "bottomk", "label_values",
    "clamp_min", "clamp_max", "abs", "delta", "deriv", "time", "vector", "scalar",
})


def expressions(dashboard: dict[str, Any] | None = None) -> list[str]:
    """Every PromQL expression: the panels' targets (rows' nested panels too) and the variables' queries."""
    dashboard = dashboard if dashboard is not None else json.loads(DASHBOARD.read_text())
    found: list[str] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            found.extend(t["expr"] for t in panel.get("targets", []) if t.get("expr"))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "datasource":  # its query is a plugin id (prometheus), not PromQL
            continue
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if isinstance(query, str) and query:
            found.append(query)
    return found


def names_in(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) an expression reads. Label names are the keys of ``{…}``
    matchers and of ``by`` / ``without`` / ``on`` / ``ignoring`` lists; a metric name is any
    other identifier that is not a PromQL function or keyword (``le`` is a label)."""
    labels: set[str] = set()
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        labels |= set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    for listed in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        labels |= {n.strip() for n in listed.split(",") if n.strip()}
    bare = re.sub(r"\{[^}]*\}", " ", expr)
    bare = re.sub(r"\[[^\]]*\]", " ", bare)  # range durations, $__rate_interval
    bare = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    bare = re.sub(r'"[^"]*"', " ", bare)
    metrics = set()
    for found in re.finditer(r"(?<![\w$.])[a-zA-Z_:][a-zA-Z0-9_:]*", bare):
        name, after = found.group(), bare[found.end():].lstrip()
        if not after.startswith("(") and name not in _PROMQL_WORDS and not name.startswith("__"):
            metrics.add(name)
    return metrics, labels


def scraped(text: str) -> tuple[set[str], set[str]]:
    """(sample names, label names) of a Prometheus text scrape."""
    metrics, labels = set(), set()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        metrics.add(name.split()[0])
        if rest:
            labels |= set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', rest.rsplit("}", 1)[0]))
    return metrics, labels


def unknown_names(text: str) -> list[str]:
    """The dashboard's metric and label names the scrape ``text`` lacks, with their expression."""
    have_metrics, have_labels = scraped(text)
    missing = []
    for expr in expressions():
        metrics, labels = names_in(expr)
        missing += [f"metric {m} in {expr}" for m in sorted(metrics - have_metrics)]
        missing += [f"label {n} in {expr}" for n in sorted(labels - have_labels - {"le"})]
    return missing


def _in_process_scrape() -> str:
    """One data point in every instrument the worker and the gateway create, scraped."""
    from reasonwire.workers.ops.health import HealthMetrics
    from reasonwire.workers.ops.metrics import GatewayMetrics
    from reasonwire.workers.ops.telemetry import setup_telemetry
    from reasonwire.workers.ops.telemetry.normalizer import NormalizerTelemetry

    telemetry = setup_telemetry(install_global=False, env={"OTEL_METRICS_EXPORTER": "prometheus"})
    n = NormalizerTelemetry(telemetry, group_id="g")
    model = {"gen_ai.provider.name": "anthropic", "gen_ai.response.model": "claude-opus-4-5"}
    n.records.add(1, {"reasonwire.record.outcome": "translated"})
    n.dead_letters.add(1, {"reasonwire.dlq.cause": "envelope", "reasonwire.dlq.code": "invalid_envelope"})
    n.runs_ended.add(1, {**model, "reasonwire.run.outcome": "finished"})
    n.tokens.add(5, {**model, "reasonwire.token.type": "reasoning"})
    n.first_reasoning.record(0.2, model)
    n.first_text.record(0.9, model)
    n.poll_duration.record(0.01)
    n.record_delay.record(0.02)
    HealthMetrics(telemetry).lag[0] = 3
    text = telemetry.scrape()
    assert text is not None
    return text.decode() + _gateway_scrape()


def _gateway_scrape() -> str:
    """One data point in every instrument of the gateway's ``/metrics``."""
    from reasonwire.workers.ops.metrics import GatewayCounts, GatewayMetrics

    counts = GatewayCounts(resumed=1, sent_bytes=100)
    counts.ingest_records["anthropic-messages"] += 3
    counts.ingest_bytes["anthropic-messages"] += 300
    counts.ingest_refusals["malformed_event"] += 1
    gateway = GatewayMetrics(SimpleNamespace(clients=1, served=2, dropped=0, counts=counts, fanout=SimpleNamespace(readers={})))
    gateway.duration.record(0.01, {"http.request.method": "GET", "http.route": "/healthz", "http.response.status_code": 200})
    gateway.active.add(1, {"http.request.method": "GET", "url.scheme": "http"})
    return gateway.scrape().decode()


def test_the_gateways_red_metrics_follow_the_opentelemetry_http_conventions() -> None:
    """``http.server.request.duration`` (s) by method, route and status; active requests; the
    ingest and SSE reader counters — as Prometheus scrapes them."""
    text = _gateway_scrape()
    assert 'http_server_request_duration_seconds_bucket{' in text
    line = next(l for l in text.splitlines() if l.startswith("http_server_request_duration_seconds_count{"))
    assert 'http_request_method="GET"' in line and 'http_route="/healthz"' in line and 'http_response_status_code="200"' in line
    assert 'le="0.005"' in text and 'le="10.0"' in text  # the conventions' advised boundaries
    assert "http_server_active_requests{" in text
    for name in ("reasonwire_gateway_ingest_records_total", "reasonwire_gateway_ingest_size_bytes_total", "reasonwire_gateway_ingest_refusals_total",
                 "reasonwire_gateway_streams_resumed_total", "reasonwire_gateway_streams_dropped_total", "reasonwire_gateway_sent_bytes_total"):
        assert name in text, name


def test_promql_names_are_parsed_out_of_the_expressions() -> None:
    metrics, labels = names_in(
        'histogram_quantile(0.95, sum by (le, gen_ai_provider_name) (rate(reasonwire_poll_duration_seconds_bucket{a="b", c=~"d|e"}[$__rate_interval]))) / sum(up)'
    )
    assert metrics == {"reasonwire_poll_duration_seconds_bucket", "up"}
    assert labels == {"le", "gen_ai_provider_name", "a", "c"}


def test_dashboard_shows_what_operators_need() -> None:
    text = " ".join(expressions())
    for needed in (
        "reasonwire_usage_tokens_total", 'reasonwire_token_type=~"reasoning|answer"', "gen_ai_response_model",
        "reasonwire_run_time_to_first_reasoning_seconds_bucket", "reasonwire_run_time_to_first_text_seconds_bucket",
        "reasonwire_runs_ended_total", "reasonwire_dlq_records_total", "reasonwire_dlq_code", "reasonwire_consumer_lag",
        "reasonwire_poll_duration_seconds_bucket", "reasonwire_gateway_clients",
        "http_server_request_duration_seconds_bucket", "http_route", "http_response_status_code", "http_server_active_requests",
        "reasonwire_gateway_ingest_refusals_total", "reasonwire_gateway_streams_dropped_total", "reasonwire_gateway_sent_bytes_total",
    ):
        assert needed in text, needed


def test_every_dashboard_query_names_only_metrics_the_instruments_produce() -> None:
    assert unknown_names(_in_process_scrape()) == []


def test_a_name_the_code_does_not_record_is_caught() -> None:
    """The check can fail: a misspelt metric (no ``_total``) is reported."""
    dashboard = json.loads(DASHBOARD.read_text())
    dashboard["panels"][1]["targets"][0]["expr"] = "sum(rate(reasonwire_usage_tokens[5m]))"
    have, _ = scraped(_in_process_scrape())
    [expr] = [e for e in expressions(dashboard) if "reasonwire_usage_tokens[" in e]
    assert names_in(expr)[0] - have == {"reasonwire_usage_tokens"}
