"""The per-run metrics operators need, from the run's usage
record: runs ended by outcome, tokens by type — input, reasoning, answer (output less reasoning),
disjoint — and the times to first reasoning and to first answer text, by provider and model."""

from __future__ import annotations

from typing import Any

import orjson

from reasonwire.workers.core.normalizer import Normalizer
from reasonwire.workers.ops.telemetry.normalizer import NormalizerTelemetry
from reasonwire.workers.translators import translator_for
from tests.unit.test_telemetry import LOCAL_FIXTURES, _metric_points, _records, _steps, telemetry  # noqa: F401 (the fixture)


def test_an_ended_run_counts_its_outcome_tokens_by_type_and_first_reasoning_and_text_times(telemetry: Any) -> None:
    t, _, metrics = telemetry
    traces, normalizer, records = NormalizerTelemetry(t, group_id="g"), Normalizer(translators=translator_for), _records()
    with traces.batch(records) as trace:
        trace.stepped(_steps(normalizer, records))
    traces.flush_counts(now=float("inf"))
    expected = orjson.loads((LOCAL_FIXTURES / "anthropic-messages" / "b_reasoning_then_tool_call.expected.json").read_bytes())["usage"]
    points = _metric_points(metrics)
    [(labels, ended)] = points["reasonwire.runs.ended"]
    assert ended == 1 and labels["reasonwire.run.outcome"] == "finished" and labels["gen_ai.provider.name"] == "anthropic"
    model = labels.get("gen_ai.response.model")
    assert model  # the response's model: the dashboard's per-model split
    tokens = {labels["reasonwire.token.type"]: value for labels, value in points["reasonwire.usage.tokens"]}
    assert tokens["reasoning"] == expected["reasoning_tokens"]
    assert tokens["answer"] == expected["output_tokens"] - expected["reasoning_tokens"]
    assert tokens["input"] == expected["input_tokens"]
    [(first_labels, reasoning_count)] = points["reasonwire.run.time_to_first_reasoning"]
    [(_, text_count)] = points["reasonwire.run.time_to_first_text"]
    assert reasoning_count == text_count == 1 and first_labels == {"gen_ai.provider.name": "anthropic", "gen_ai.response.model": model}


def test_a_poll_that_failed_counts_no_run() -> None:
    """Counted only for committed polls: a redelivered poll does not count a run twice."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from reasonwire.workers.ops.telemetry import setup_telemetry

    reader = InMemoryMetricReader()
    t = setup_telemetry(metric_reader=reader, install_global=False, env={})
    traces, normalizer, records = NormalizerTelemetry(t, group_id="g"), Normalizer(translators=translator_for), _records()
    try:
        with traces.batch(records) as trace:
            trace.stepped(_steps(normalizer, records))
            raise ConnectionError("the broker went away")
    except ConnectionError:
        pass
    traces.flush_counts(now=float("inf"))
    assert "reasonwire.runs.ended" not in _metric_points(reader)
    t.log_guard.uninstall()
