"""The telemetry guards and the normalizer's spans and metrics, without a broker (P8, P6).

The guards are tested as an adversary would use them: spans and log lines that
*try* to carry content (foreign attributes, exception events, status text,
``%s`` arguments, exception messages, a logger that does not propagate) and the
check that none of it reaches an exporter or a handler's output.
"""

from __future__ import annotations

import time

from opentelemetry import metrics

import logging
import random
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from reasonwire.contracts import topics
from reasonwire.contracts.envelope import Control
from tests.conformance.oracle import LOCAL_FIXTURES
from reasonwire.workers.core.normalizer import Normalizer, RawRecord, Step
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.ops.telemetry import Telemetry, setup_telemetry
from reasonwire.workers.ops.telemetry.normalizer import NormalizerTelemetry
from reasonwire.workers.ops.telemetry.registry import MIN_NEEDLE, REDACTED, RENDERINGS, SLICE, STRIDE, OpaqueRegistry
from reasonwire.workers.translators import translator_for

SIGNATURE = "EqQBCkYIBRgCKkBopaque+only/signatureAAAAbbbbCCCCddddEEEEffff0123456789+/=="
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
BASE64 = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", min_size=SLICE, max_size=300)


@pytest.fixture
def telemetry() -> Iterator[tuple[Telemetry, InMemorySpanExporter, InMemoryMetricReader]]:
    spans, metrics = InMemorySpanExporter(), InMemoryMetricReader()
    t = setup_telemetry(span_exporter=spans, metric_reader=metrics, install_global=False, env={})
    yield t, spans, metrics
    t.log_guard.uninstall()
    t.shutdown()


def _metric_points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = [(dict(p.attributes), getattr(p, "value", None) if hasattr(p, "value") else p.count) for p in m.data.data_points]
    return out


# -- the registry ---------------------------------------------------------------------


@settings(max_examples=200)
@given(value=BASE64, data=st.data())
def test_any_27_char_stretch_of_a_registered_value_is_redacted_P8(value: str, data: Any) -> None:
    registry = OpaqueRegistry()
    registry.add(value)
    start = data.draw(st.integers(0, len(value) - SLICE - STRIDE + 1), label="start") if len(value) >= SLICE + STRIDE - 1 else 0
    stop = data.draw(st.integers(min(len(value), start + SLICE + STRIDE - 1), len(value)), label="stop")
    leaked = value[start:stop]
    text = f"error: {leaked} (while writing)"
    redacted = registry.redact(text)
    assert leaked not in redacted and REDACTED in redacted
    assert not any(value[i : i + SLICE] in redacted for i in range(0, len(value) - SLICE + 1, STRIDE))
    assert redacted.startswith("erro") and redacted.endswith("writing)")  # widened by at most STRIDE-1


@settings(max_examples=100)
@given(text=st.text(min_size=SLICE, max_size=200), cuts=st.lists(st.integers(1, 199), max_size=12))
def test_reasoning_registered_in_pieces_is_found_like_the_whole_text_P8(text: str, cuts: list[int]) -> None:
    bounds = sorted({0, len(text), *(c for c in cuts if c < len(text))})
    registry = OpaqueRegistry()
    for a, b in zip(bounds, bounds[1:], strict=False):
        registry.add_stream("message-1", text[a:b])
    registry.add_stream("message-1", "", end=True)
    assert registry.contains(text)
    assert registry.contains(f">>{text[-SLICE:]}<<")  # the tail is registered at the end
    assert REDACTED in registry.redact(repr(orjson.dumps({"delta": text})))  # as aiokafka logs a value


def test_short_values_are_needles_and_tiny_ones_are_ignored_P8() -> None:
    registry = OpaqueRegistry()
    registry.add("SIG-U/0==")  # 9 characters: a whole-value needle
    registry.add("ab12")  # too short to tell from ordinary text
    assert registry.redact("sig SIG-U/0== end") == f"sig {REDACTED} end"
    assert not registry.contains("ab12 and SIG-U/0=")


def test_the_registry_is_bounded_and_forgets_the_oldest_first() -> None:
    registry = OpaqueRegistry(max_slices=100, max_needles=2)
    registry.add(SIGNATURE)
    for i in range(200):
        registry.add(f"filler-{i:04d}-" + "x" * 40)
    assert len(registry) <= 102 and not registry.contains(SIGNATURE)


WINDOW = SLICE + STRIDE - 1
"""The shortest stretch of a registered text the registry guarantees to find."""
_PIECES = (
    ("plain", "abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789 .,;:-_/+=()"),
    ("quotes", "\"'\\"),
    ("controls", "\n\t\r\x00\x1f\x7f"),
    ("non-ascii", "éüß—“”€"),
    ("emoji", "🙂🚀👍🏽"),
)


def _random_text(rng: random.Random, max_len: int) -> str:
    """Mostly plain text; per text, a random share of quotes, control, non-ASCII and emoji characters."""
    weights = [1.0] + [rng.choice((0.0, 0.0, 0.02, 0.1)) for _ in _PIECES[1:]]
    kinds = rng.choices([chars for _, chars in _PIECES], weights=weights, k=rng.randint(0, max_len))
    return "".join(rng.choice(chars) for chars in kinds)


def _random_cuts(rng: random.Random, text: str) -> list[str]:
    """``text`` in deltas of random sizes: empty and one-character deltas included."""
    deltas, at = [], 0
    while at < len(text):
        size = rng.choice((0, 1, 1, 2, 3, rng.randint(4, 30), rng.randint(30, 90)))
        deltas.append(text[at : at + size])
        at += size
    return deltas + [""] * rng.randint(0, 1)


def _assert_every_window_is_found(registry: OpaqueRegistry, text: str) -> None:
    """Every WINDOW-long stretch of every rendering is redacted whole; short renderings are needles."""
    for render in RENDERINGS:
        rendered = render(text)
        if len(rendered) >= SLICE:
            for i in range(len(rendered) - WINDOW + 1):
                window = rendered[i : i + WINDOW]
                assert registry.redact(window) == REDACTED, (render.__name__, text, i, window)
                if i % 5 == 0:  # longer stretches, in a text, are redacted whole too
                    longer = rendered[i : i + WINDOW + i * 7 % 61]
                    assert registry.redact(f"<{longer}>").strip("<>") == REDACTED, (render.__name__, text, i, longer)
            assert registry.contains(rendered[-SLICE:]), (render.__name__, text, "tail")
        elif len(rendered) >= MIN_NEEDLE:
            assert registry.redact(rendered) == REDACTED, (render.__name__, text, "needle")


def test_every_27_char_window_of_every_rendering_of_an_added_text_is_found_P8() -> None:
    """P8, seeded property test: plain, quoted, control, non-ASCII and emoji texts, whole."""
    rng = random.Random(20261201)
    for _ in range(150):
        registry = OpaqueRegistry()
        text = _random_text(rng, 160)
        registry.add(text)
        if len(text) >= MIN_NEEDLE:
            _assert_every_window_is_found(registry, text)
        else:
            assert not len(registry)


def test_every_27_char_window_of_every_rendering_of_a_stream_is_found_P8() -> None:
    """P8, seeded property test: three messages registered in interleaved deltas of random sizes."""
    rng = random.Random(17)
    for _ in range(60):
        registry = OpaqueRegistry()
        texts = [_random_text(rng, 200) for _ in range(3)]
        queues = [(f"m{k}", _random_cuts(rng, text)) for k, text in enumerate(texts)]
        while any(deltas for _, deltas in queues):
            key, deltas = rng.choice([q for q in queues if q[1]])
            registry.add_stream(key, deltas.pop(0))
        for key, _ in queues:
            registry.add_stream(key, "", end=True)
        for text in texts:
            _assert_every_window_is_found(registry, text)
        whole = OpaqueRegistry()  # in pieces or whole, the same slices and needles
        for text in (t for t in texts if len(t) >= MIN_NEEDLE):
            whole.add(text)
        if all(len(t) >= MIN_NEEDLE for t in texts):
            assert (registry._young | registry._old, registry._needles) == (whole._young | whole._old, whole._needles)  # noqa: SLF001


def test_a_stream_that_turns_from_plain_to_escaped_is_found_across_the_switch_P8() -> None:
    """P8: plain deltas share one tail for the three renderings; the first delta that renders
    differently forks it, and windows of the escaped renderings spanning the switch are found."""
    deltas = ["The plan is simple enough to ", "state on one line, ", 'then "quoted" naïve 🙂 text\n', "and plain again to the end."]
    text = "".join(deltas)
    assert len({render(text) for render in RENDERINGS}) == 3
    for switch in ('"', "é", "\n", "'", "🙂"):
        for shift in range(STRIDE):  # the switch at every alignment
            pieces = ["x" * shift + deltas[0], deltas[1], deltas[2].replace('"', switch), deltas[3]]
            registry = OpaqueRegistry()
            for piece in pieces:
                registry.add_stream("message", piece)
            registry.add_stream("message", "", end=True)
            _assert_every_window_is_found(registry, "".join(pieces))


def test_the_slice_bound_holds_after_every_call_even_for_large_inputs_P8() -> None:
    """P8: max_slices bounds the slices after every call, a call larger than the bound included."""
    rng = random.Random(5)
    registry = OpaqueRegistry(max_slices=1_000, max_needles=16)
    for i in range(200):
        if i % 3:
            registry.add(_random_text(rng, 4_000) + f"{i:08d}")
        else:
            registry.add_stream(i % 7, _random_text(rng, 3_000), end=i % 2 == 0)
        assert len(registry) <= 1_000 + 16
    newest = "the newest value, registered last: " + "Zq9" * 20
    registry.add(newest)
    assert registry.contains(newest)


def test_the_registry_remembers_at_least_the_newest_half_of_its_bound_P8() -> None:
    """P8: forgetting is by generation; what was registered in the last max_slices // 2 slices stays."""
    registry = OpaqueRegistry(max_slices=2_000)
    for i in range(300):
        registry.add(f"filler-{i:04d}-" + "x" * 40)
    registry.add(SIGNATURE)
    for i in range(900 // 10):  # about 10 slices each: 900 more slices, less than half the bound
        registry.add(f"later-{i:04d}-" + "y" * 30)
    assert registry.contains(SIGNATURE)
    for filler in ("a" * 8_000, "b" * 8_000):  # 2 000 slices each, but one distinct: no flush
        registry.add(filler)
    assert registry.contains(SIGNATURE)


# -- the span guard -------------------------------------------------------------------


def test_span_guard_keeps_only_allowlisted_well_formed_attributes_P8(telemetry: Any) -> None:
    t, spans, metrics = telemetry
    t.registry.add(SIGNATURE)
    with t.tracer.start_as_current_span("process reasoning.raw.v1") as span:
        span.set_attributes(
            {
                "gen_ai.provider.name": "anthropic",
                "gen_ai.request.model": "claude-sonnet-4-5",
                "gen_ai.usage.output_tokens": 187,
                "reasonwire.run.id": "run-1",
                "messaging.kafka.message.key": "run-1",  # not ours to record: a key is the producer's bytes
                "gen_ai.output.messages": "The user asks whether 2027 is prime",  # free text: no key admits it
                "gen_ai.provider.name.extra": "x",
                "reasonwire.tenant": "acme corp with spaces",  # breaks the identifier shape
                "gen_ai.conversation.id": SIGNATURE[22:62],  # well-shaped, but registered content
                "gen_ai.usage.input_tokens": "623",  # wrong type
                "reasonwire.artefact.kind": "anthropic.thinking.signature",
            }
        )
    [exported] = spans.get_finished_spans()
    assert dict(exported.attributes) == {
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.usage.output_tokens": 187,
        "reasonwire.run.id": "run-1",
        "reasonwire.artefact.kind": "anthropic.thinking.signature",
        "reasonwire.guard.dropped": 6,
    }
    [(labels, removed)] = _metric_points(metrics)["reasonwire.guard.removed"]
    assert labels == {"reasonwire.guard.signal": "span_attribute"} and removed == 6


def test_closed_vocabularies_skip_the_content_scan_open_shapes_do_not_P8(telemetry: Any) -> None:
    """A value admitted from a set our code defines (a topic name) is never content, so it is
    kept without a scan even when some reasoning quoted it; an identifier-shaped value that is
    registered content is dropped."""
    t, _, _ = telemetry
    conversation = "conv-1234567890abcdef1234567890"
    t.registry.add(topics.EVENTS)  # as if a reasoning message had been exactly this word
    t.registry.add(conversation)
    assert t.guard.clean(topics.EVENTS) is False  # the scan would have dropped it
    kept, dropped = t.guard.attributes({"messaging.destination.name": topics.EVENTS, "gen_ai.conversation.id": conversation})
    assert kept == {"messaging.destination.name": topics.EVENTS} and dropped == 1


def test_span_guard_drops_exception_events_and_exception_text_in_status_P8(telemetry: Any) -> None:
    t, spans, _ = telemetry
    t.registry.add(SIGNATURE)
    with pytest.raises(RuntimeError):
        with t.tracer.start_as_current_span("reasonwire.run"):  # SDK defaults: record and set status
            raise RuntimeError(f"EXEC failed: SET rw:artefact {SIGNATURE}")
    with t.tracer.start_as_current_span("reasonwire.run") as span:
        span.add_event("reasonwire.artefact", {"reasonwire.artefact.bytes": 75, "reasonwire.artefact.value": SIGNATURE})
        span.add_event("gen_ai.choice", {"message": "readable reasoning"})
        span.set_status(Status(StatusCode.ERROR, "StoreOutage"))
    failed, ours = spans.get_finished_spans()
    assert [e.name for e in failed.events] == []  # the SDK's "exception" event: message and stack trace
    assert failed.status.status_code is StatusCode.ERROR and failed.status.description is None
    assert [(e.name, dict(e.attributes)) for e in ours.events] == [("reasonwire.artefact", {"reasonwire.artefact.bytes": 75})]
    assert ours.status.description == "StoreOutage"  # an exception type name is all a status may say


def test_span_guard_renames_foreign_span_names_P8(telemetry: Any) -> None:
    t, spans, _ = telemetry
    with t.tracer.start_as_current_span("SET rw:artefact:acme:thread-1 EqQBCkYIBRgCKkB"):
        pass
    [exported] = spans.get_finished_spans()
    assert exported.name == "span"


def test_without_exporters_nothing_is_exported_but_the_guards_are_on_P8() -> None:
    t = setup_telemetry(env={"OTEL_TRACES_EXPORTER": "none"}, install_global=False)
    try:
        span = t.tracer.start_span("reasonwire.run")
        assert not span.is_recording()  # no export path: nothing is even recorded
        assert isinstance(t.meter_provider, metrics.NoOpMeterProvider)
        assert logging.getLogRecordFactory() is t.log_guard._factory  # noqa: SLF001
    finally:
        t.log_guard.uninstall()
        t.shutdown()


def test_otel_environment_selects_the_exporters_and_wraps_each_in_the_guard() -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    from reasonwire.workers.ops.telemetry import exporters_from_env
    from reasonwire.workers.ops.telemetry.guard import GuardedSpanProcessor

    env = {"OTEL_TRACES_EXPORTER": "console,otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    assert [type(e) for e in exporters_from_env("traces", env)] == [ConsoleSpanExporter, OTLPSpanExporter]
    with pytest.raises(RuntimeError, match="no such exporter"):
        list(exporters_from_env("traces", {"OTEL_TRACES_EXPORTER": "carrier-pigeon"}))
    t = setup_telemetry(env={"OTEL_TRACES_EXPORTER": "console"}, install_global=False)
    try:
        processors = t.tracer_provider._active_span_processor._span_processors  # noqa: SLF001
        assert len(processors) == 1 and isinstance(processors[0], GuardedSpanProcessor)
    finally:
        t.log_guard.uninstall()
        t.shutdown()


# -- metrics --------------------------------------------------------------------------


def test_metric_labels_are_allowlisted_even_for_third_party_instruments_P8(telemetry: Any) -> None:
    t, _, metrics = telemetry
    t.registry.add(SIGNATURE)
    foreign = t.meter_provider.get_meter("some.library").create_counter("library.calls")
    foreign.add(1, {"db.statement": f"SET k {SIGNATURE}", "gen_ai.provider.name": "openai"})
    ours = t.counter("reasonwire.test", unit="1", description="test")
    ours.add(1, {"reasonwire.artefact.kind": SIGNATURE[:30], "gen_ai.provider.name": "not-a-provider", "messaging.destination.name": topics.EVENTS})
    points = _metric_points(metrics)
    assert points["library.calls"] == [({"gen_ai.provider.name": "openai"}, 1)]
    assert points["reasonwire.test"] == [({"messaging.destination.name": topics.EVENTS}, 1)]
    assert isinstance(t.meter_provider, MeterProvider)


# -- the log guard --------------------------------------------------------------------


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def lines(telemetry: Any) -> Iterator[tuple[Telemetry, _Lines, logging.Logger]]:
    t = telemetry[0]
    handler = _Lines()
    logger = logging.getLogger("reasonwire.test.guard")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False  # like FastStream's access logger: the root's handlers never see it
    t.registry.add(SIGNATURE)
    yield t, handler, logger
    logger.removeHandler(handler)


def test_log_guard_redacts_the_message_and_its_args_P8(lines: Any) -> None:
    _, handler, logger = lines
    logger.warning(f"value {SIGNATURE} in the message")
    logger.warning("value %s in the args, run %s", SIGNATURE, "run-1")
    logger.info("nothing to hide in run %s", "run-1")
    # A hit is widened by up to STRIDE-1 characters each side: the leaked stretch may start unaligned.
    assert handler.lines == [f"val{REDACTED} the message", f"val{REDACTED} the args, run run-1", "nothing to hide in run run-1"]


def test_bytes_log_arguments_are_logged_as_their_size_P8(lines: Any) -> None:
    _, handler, logger = lines
    value = orjson.dumps({"type": "REASONING_MESSAGE_CONTENT", "delta": "Let me think about "})
    logger.debug("Sending (key=%s value=%s) to %s", b"run-1", value, "reasoning.events.v1")  # as aiokafka does
    assert handler.lines == [f"Sending (key=<5 bytes> value=<{len(value)} bytes>) to reasoning.events.v1"]


def test_log_guard_redacts_exception_text_and_drops_the_live_exception_P8(lines: Any) -> None:
    _, handler, logger = lines
    records: list[logging.LogRecord] = []
    handler.addFilter(lambda r: records.append(r) or True)
    try:
        raise ConnectionError(f"pipeline failed: HSET journal 3 {orjson.dumps({'signature': SIGNATURE}).decode()}")
    except ConnectionError as exc:
        logger.error("StoreOutage: %s", exc, exc_info=exc)
    [line] = handler.lines
    assert SIGNATURE[:SLICE] not in line and "ConnectionError" in line and REDACTED in line
    assert records[0].exc_info is None and REDACTED in (records[0].exc_text or "")  # no handler can re-format it


def test_log_filter_on_a_handler_also_redacts_text_a_formatter_cached_P8(lines: Any) -> None:
    t, _, _ = lines
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom", None, None)
    record.exc_text = f"Traceback ...\nValueError: {SIGNATURE}"
    record.detail = f"extra {SIGNATURE}"
    assert t.log_guard.filter.filter(record)
    assert SIGNATURE[:SLICE] not in record.exc_text and SIGNATURE[:SLICE] not in record.detail


# -- the normalizer's spans and metrics -----------------------------------------------

RUN = RunEnvelope("anthropic-messages", "run-1", "thread-1", tenant="acme", model="claude-sonnet-4-5")


def _records(path: str = "b_reasoning_then_tool_call.jsonl", run: RunEnvelope = RUN) -> list[RawRecord]:
    with (LOCAL_FIXTURES / "anthropic-messages" / path).open() as f:
        records = list(raw_records(run, read_events(f), end=Control.END))
    return [RawRecord(r.key, r.value, (*r.headers, ("traceparent", TRACEPARENT.encode())), 3, i) for i, r in enumerate(records)]


def _steps(normalizer: Normalizer, records: list[RawRecord]) -> list[Step]:
    return [normalizer.accept(normalizer.route(r), now=0.0) for r in records]  # type: ignore[arg-type]


def test_a_run_span_carries_genai_usage_and_latency_and_links_to_the_producer_P6(telemetry: Any) -> None:
    t, spans, metrics = telemetry
    traces, normalizer, records = NormalizerTelemetry(t, group_id="g"), Normalizer(translators=translator_for), _records()
    with traces.batch(records) as trace:
        trace.stepped(_steps(normalizer, records))
    finished = spans.get_finished_spans()
    [run] = [s for s in finished if s.name == "reasonwire.run"]
    assert format(run.parent.trace_id, "032x") == TRACEPARENT.split("-")[1]  # the ingress's trace
    assert {k: run.attributes[k] for k in ("gen_ai.provider.name", "gen_ai.request.model", "gen_ai.conversation.id", "reasonwire.run.outcome")} == {
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.conversation.id": "thread-1",
        "reasonwire.run.outcome": "finished",
    }
    usage = orjson.loads((LOCAL_FIXTURES / "anthropic-messages" / "b_reasoning_then_tool_call.expected.json").read_bytes())["usage"]
    assert run.attributes["gen_ai.usage.output_tokens"] == usage["output_tokens"]
    assert run.attributes["gen_ai.usage.reasoning.output_tokens"] == usage["reasoning_tokens"]
    assert run.attributes["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert run.attributes["reasonwire.usage.time_to_first_reasoning_ms"] <= run.attributes["reasonwire.usage.time_to_first_text_ms"]
    # One process span for the poll's records of the run (not one per record), under the run span,
    # linked to the producer's context; the end record arrives after the run ended: not the run's.
    [process] = [s for s in finished if s.name == "process reasoning.raw.v1"]
    assert process.parent is not None and process.parent.span_id == run.context.span_id
    assert process.attributes["messaging.batch.message_count"] == len(records) - 1 == run.attributes["reasonwire.run.records"]
    assert process.attributes["messaging.operation.type"] == "process" and process.attributes["messaging.destination.partition.id"] == "3"
    assert [format(link.context.span_id, "016x") for link in process.links] == [TRACEPARENT.split("-")[2]]
    [artefact] = [e for e in process.events if e.name == "reasonwire.artefact"]
    assert set(artefact.attributes) == {
        "reasonwire.artefact.kind",
        "reasonwire.artefact.subtype",
        "reasonwire.artefact.bytes",
        "reasonwire.artefact.sha256",
        "reasonwire.artefact.complete",
    }
    points = _metric_points(metrics)
    assert sum(v for _, v in points["reasonwire.artefacts.size"]) == artefact.attributes["reasonwire.artefact.bytes"]
    assert {labels["messaging.destination.name"] for labels, _ in points["reasonwire.events"]} >= {topics.EVENTS}
    outcomes = {labels["reasonwire.record.outcome"]: v for labels, v in points["reasonwire.records"]}
    assert outcomes.get("skipped_run_ended") == 1 and sum(outcomes.values()) == len(records)


def test_unknown_events_and_dead_letters_are_counted_by_fixed_labels_P3_R7(telemetry: Any) -> None:
    t, _, metrics = telemetry
    traces, normalizer = NormalizerTelemetry(t, group_id="g"), Normalizer(translators=translator_for)
    records = _records("f_unknown_events.jsonl", RunEnvelope("anthropic-messages", "run-u", "thread-u"))
    bad = RawRecord(b"k", b"{}", (("rw-provider", b"smoke-signals"),), 0, 99)
    malformed = RunEnvelope("anthropic-messages", "run-m", "thread-m")
    broken = [RawRecord(b"run-m", b"{not json", tuple(malformed.headers(0)), 1, 0)]
    with traces.batch([*records, bad, *broken]) as trace:
        steps = _steps(normalizer, records)
        steps.append(Step(outbound=[]))  # what the worker builds for a dead letter, minus its bytes
        steps += _steps(normalizer, broken)
        trace.stepped(steps)
    points = _metric_points(metrics)
    unknown = {labels["reasonwire.warning.code"]: v for labels, v in points["reasonwire.events.unknown"]}
    assert unknown == {"unknown_event": 1, "unknown_delta": 1, "unknown_block": 1}  # expected.json unknown_lines 2, 5, 11
    assert sorted((labels.get("reasonwire.dlq.cause"), labels.get("reasonwire.dlq.code"), v) for labels, v in points["reasonwire.dlq.records"]) == [
        ("envelope", "invalid_envelope", 1),
        ("malformed_event", "malformed_event", 1),
    ]  # by the rw-dlq-code the dead letter carries


def test_a_failed_batch_ends_its_spans_with_the_exception_type_only_and_counts_nothing_P8(telemetry: Any) -> None:
    t, spans, metrics = telemetry
    traces, normalizer, records = NormalizerTelemetry(t, group_id="g"), Normalizer(translators=translator_for), _records()

    class StoreOutage(Exception):
        pass

    with pytest.raises(StoreOutage):
        with traces.batch(records) as trace:
            steps = _steps(normalizer, records)
            trace.stepped(steps)
            raise StoreOutage(f"SET rw:artefact {next(a for s in steps for a in s.artefacts).value}")
    [failed] = spans.get_finished_spans()  # the run's process span for this poll; the run goes on (retried)
    assert failed.status.status_code is StatusCode.ERROR and failed.status.description == "StoreOutage"
    assert failed.attributes["error.type"].endswith("StoreOutage") and not failed.events
    assert failed.attributes["messaging.batch.message_count"] == len(records) and list(traces.runs) == [("acme", "run-1")]
    assert "reasonwire.records" not in _metric_points(metrics)  # the redelivered poll counts once


def test_a_failed_poll_of_a_record_of_no_run_held_leaves_no_run_span_open(telemetry: Any) -> None:
    """Found by review: the failure path started a run span for every record naming a run, even
    the ingress's ``end`` record after the provider's own end (judged as of no run held); the
    retry then put that record in the span, which nothing ever ended (until the worker stopped)."""
    t, spans, _ = telemetry
    traces, normalizer, records = NormalizerTelemetry(t, group_id="g"), Normalizer(translators=translator_for), _records()
    *stream, end = records
    with traces.batch(stream) as trace:
        trace.stepped(_steps(normalizer, stream))
    assert list(traces.runs) == []  # the provider's own end ended the run

    class StoreOutage(Exception):
        pass

    with pytest.raises(StoreOutage):
        with traces.batch([end]) as trace:
            trace.stepped(_steps(normalizer, [end]))
            raise StoreOutage
    assert list(traces.runs) == []
    with traces.batch([end]) as trace:  # the retry commits
        trace.stepped(_steps(normalizer, [end]))
    assert list(traces.runs) == []
    assert [s.name for s in spans.get_finished_spans()].count("reasonwire.run") == 1


def test_content_is_registered_before_the_store_can_quote_it_P8(telemetry: Any) -> None:
    t, _, _ = telemetry
    traces, normalizer, records = NormalizerTelemetry(t, group_id="g"), Normalizer(translators=translator_for), _records()
    with traces.batch(records) as trace:
        steps = _steps(normalizer, records)
        trace.stepped(steps)
        [value] = [a.value for s in steps for a in s.artefacts]
        reasoning = "".join(
            e["delta"] for s in steps for o in s.outbound if o.topic == topics.EVENTS for e in [orjson.loads(o.value)] if e["type"] == "REASONING_MESSAGE_CONTENT"
        )
        assert t.registry.contains(value) and t.registry.contains(reasoning[5:40])


def test_without_exporters_a_batch_builds_no_span_but_still_registers_its_content_P8() -> None:
    t = setup_telemetry(install_global=False, env={})
    try:
        traces, normalizer, records = NormalizerTelemetry(t, group_id="g"), Normalizer(translators=translator_for), _records()
        assert not t.tracing and not t.metering
        with traces.batch(records) as trace:
            steps = _steps(normalizer, records)
            trace.stepped(steps)
        assert not traces.runs and not t.tracing  # no run met: nothing read, no span
        [value] = [a.value for s in steps for a in s.artefacts]
        reasoning = "".join(
            e["delta"] for s in steps for o in s.outbound if o.topic == topics.EVENTS for e in [orjson.loads(o.value)] if e["type"] == "REASONING_MESSAGE_CONTENT"
        )
        assert t.registry.contains(value) and t.registry.contains(reasoning[-30:]) and t.registry.contains(reasoning[3:40])
    finally:
        t.log_guard.uninstall()
        t.shutdown()


def test_a_message_registered_per_poll_is_found_like_one_registered_per_delta_P8() -> None:
    """stepped() joins a poll's deltas of one message: the slices are the ones per-delta registration makes."""
    per_poll, per_delta = OpaqueRegistry(), OpaqueRegistry()
    traces_a = NormalizerTelemetry(setup_telemetry(install_global=False, env={}), group_id="g")
    try:
        traces_a.telemetry.registry = per_poll
        records = _records()
        steps = _steps(Normalizer(translators=translator_for), records)
        for lo in range(0, len(steps), 4):  # polls of four records
            with traces_a.batch(records[lo : lo + 4]) as trace:
                trace.stepped(steps[lo : lo + 4])
        for s in steps:
            for o in s.outbound:
                if o.topic != topics.EVENTS:
                    continue
                e = orjson.loads(o.value)
                if e["type"] == "REASONING_MESSAGE_CONTENT":
                    per_delta.add_stream(e["messageId"], e["delta"])
                elif e["type"] == "REASONING_MESSAGE_END":
                    per_delta.add_stream(e["messageId"], "", end=True)
                elif e["type"] == "REASONING_ENCRYPTED_VALUE":
                    per_delta.add(e["encryptedValue"])
        for a in (a for s in steps for a in s.artefacts):
            per_delta.add(a.value)
        assert per_poll._young | per_poll._old == per_delta._young | per_delta._old and per_poll._needles == per_delta._needles  # noqa: SLF001
    finally:
        traces_a.telemetry.log_guard.uninstall()


def test_counts_wait_at_most_the_flush_interval_and_reach_the_sdk_without_a_later_poll(telemetry: Any) -> None:
    """The worker hands summed counts to the SDK once a second; the last poll's counts must not wait
    for a poll that never comes — the worker's periodic tick flushes them (``tick_health``)."""
    t, _, metrics = telemetry
    traces, normalizer, records = NormalizerTelemetry(t, group_id="g", metric_flush_s=1.0), Normalizer(translators=translator_for), _records()
    with traces.batch(records) as trace:
        trace.stepped(_steps(normalizer, records))
    assert "reasonwire.records" not in _metric_points(metrics)  # summed, not yet handed over
    traces.flush_counts(now=time.monotonic() + 0.5)
    assert "reasonwire.records" not in _metric_points(metrics)
    traces.flush_counts(now=time.monotonic() + 1.5)
    [(labels, value)] = [p for p in _metric_points(metrics)["reasonwire.records"] if p[0].get("reasonwire.record.outcome") == "translated"]
    assert value == sum(1 for s in _steps(Normalizer(translators=translator_for), records) if s.journal_append is not None)


def test_reasoning_no_audience_sees_is_registered_too_P8() -> None:
    """The core hands the registry the translator's reasoning before audience filtering: with every
    audience at visibility ``none`` nothing readable is published, and a leak of that text into a
    log line is still redacted."""
    from reasonwire.contracts.policy import AudienceRule, PolicyBook, ReasoningVisibility, RetentionPolicy

    hidden = AudienceRule(reasoning=ReasoningVisibility.NONE, encrypted_values=False)
    book = PolicyBook(default=RetentionPolicy(trusted=hidden, public=hidden))
    normalizer = Normalizer(book, translators=translator_for)
    traces = NormalizerTelemetry(setup_telemetry(install_global=False, env={}), group_id="g")
    try:
        registry = traces.telemetry.registry = OpaqueRegistry()
        records = _records()
        steps = _steps(normalizer, records)
        published = b"".join(o.value for s in steps for o in s.outbound)
        assert b"REASONING_MESSAGE_CONTENT" not in published and b"REASONING_ENCRYPTED_VALUE" not in published
        reasoning = "".join(d for s in steps for _, d in s.reasoning if d)
        assert len(reasoning) >= 40
        with traces.batch(records) as trace:
            trace.stepped(steps)
        leaked = f"upstream said: {reasoning[:40]} (retrying)"
        assert registry.contains(leaked) and reasoning[:40] not in registry.redact(leaked)
    finally:
        traces.telemetry.log_guard.uninstall()


@given(st.text(max_size=80) | st.text(alphabet="'\"\\\n\t\x00\x7féa", max_size=20))
def test_fast_bytes_rendering_matches_the_byte_table_P8(text: str) -> None:
    from reasonwire.workers.ops.telemetry.registry import _BYTE_REPR, _bytes_repr, _json_escaped

    assert _bytes_repr(text) == "".join(_BYTE_REPR[b] for b in _json_escaped(text).encode("utf-8", "surrogatepass"))


def test_revoked_partitions_end_their_run_spans_as_handed_over(telemetry: Any) -> None:
    t, spans, _ = telemetry
    traces, normalizer, records = NormalizerTelemetry(t, group_id="g"), Normalizer(translators=translator_for), _records()[:5]
    with traces.batch(records) as trace:
        trace.stepped(_steps(normalizer, records))
    traces.forget([3])
    [run] = [s for s in spans.get_finished_spans() if s.name == "reasonwire.run"]
    assert run.attributes["reasonwire.run.outcome"] == "handed_over" and run.attributes["reasonwire.run.records"] == 5


def test_replays_dropped_by_issuer_are_counted_by_provider_and_reason_R8() -> None:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from tests.unit.test_replay import ANTHROPIC_A, history_of, then_user
    from reasonwire.workers.replay import replay
    from reasonwire.workers.ops.telemetry import setup_telemetry
    from reasonwire.workers.ops.telemetry.replay import ReplayTelemetry
    from reasonwire.contracts.replay import ReplayTarget
    from reasonwire.contracts.grammars import Grammar

    reader = InMemoryMetricReader()
    telemetry = setup_telemetry(metric_reader=reader, install_global=False, env={})
    try:
        history, artefacts = history_of(ANTHROPIC_A)
        result = replay(then_user(history), artefacts, ReplayTarget(grammar=Grammar.ANTHROPIC_MESSAGES, model="claude-opus-4-1"))
        ReplayTelemetry(telemetry).record(Grammar.ANTHROPIC_MESSAGES, result.counters)
        points = [
            (dict(p.attributes), p.value)
            for rm in reader.get_metrics_data().resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "reasonwire.replay.artefacts.dropped"
            for p in m.data.data_points
        ]
    finally:
        telemetry.log_guard.uninstall()
    assert points == [({"gen_ai.provider.name": "anthropic", "reasonwire.replay.drop_reason": "foreign_issuer"}, 1)]


# -- nothing per record for a run that is not traced -------------------------------


def _with_traceparent(records: list[RawRecord], traceparent: str) -> list[RawRecord]:
    return [r._replace(headers=tuple((k, traceparent.encode() if k == "traceparent" else v) for k, v in r.headers)) for r in records]


def test_an_unsampled_producer_context_costs_no_span_and_no_parsing_per_record_P8(telemetry: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the default parent-based sampler, a ``traceparent`` whose sampled flag is off decides
    the run from its last character: the propagator is never called, the headers are read once
    for the run (not per record) and no span is started — yet every record is counted."""
    import reasonwire.workers.ops.telemetry.normalizer as tn

    t, spans, metrics = telemetry
    traces, normalizer = NormalizerTelemetry(t, group_id="g"), Normalizer(translators=translator_for)
    records = _with_traceparent(_records(), TRACEPARENT[:-2] + "00")
    assert traces.skip_unsampled  # the SDK default, parentbased_always_on
    reads: list[RawRecord] = []
    real_of = tn._Headers.of
    monkeypatch.setattr(tn._Headers, "of", classmethod(lambda cls, r: reads.append(r) or real_of(r)))
    monkeypatch.setattr(tn._PROPAGATOR, "extract", lambda *a, **k: pytest.fail("an unsampled traceparent was parsed"))
    monkeypatch.setattr(t.tracer_provider, "get_tracer", lambda *a, **k: pytest.fail("a tracer was asked for a span"))
    for lo in range(0, len(records), 5):
        with traces.batch(records[lo : lo + 5]) as trace:
            trace.stepped(_steps(normalizer, records[lo : lo + 5]))
    assert spans.get_finished_spans() == ()
    assert len(reads) == 2  # the run's first record, and the end record that comes after the run ended
    assert sum(v for _, v in _metric_points(metrics)["reasonwire.records"]) == len(records)


def test_a_sampled_flag_in_any_flags_byte_is_honoured(telemetry: Any) -> None:
    """The sampled bit is bit 0 of the flags: ``03`` and ``0b`` are sampled, ``02`` and ``0a`` are not."""
    t, spans, _ = telemetry
    traced = []
    for i, flags in enumerate(("03", "0b", "02", "0a")):
        traces, normalizer = NormalizerTelemetry(t, group_id="g"), Normalizer(translators=translator_for)
        run = RunEnvelope("anthropic-messages", f"run-{i}", "thread-1", tenant="acme")
        records = _with_traceparent(_records(run=run)[:3], TRACEPARENT[:-2] + flags)
        with traces.batch(records) as trace:
            trace.stepped(_steps(normalizer, records))
        traced.append(traces.runs[("acme", f"run-{i}")].span is not None)
    assert traced == [True, True, False, False]


def test_each_poll_of_a_traced_run_is_one_process_span_under_the_run(telemetry: Any) -> None:
    t, spans, _ = telemetry
    traces, normalizer, records = NormalizerTelemetry(t, group_id="g"), Normalizer(translators=translator_for), _records()
    for lo in range(0, len(records), 8):
        with traces.batch(records[lo : lo + 8]) as trace:
            trace.stepped(_steps(normalizer, records[lo : lo + 8]))
    finished = spans.get_finished_spans()
    [run] = [s for s in finished if s.name == "reasonwire.run"]
    polls = [s for s in finished if s.name == "process reasoning.raw.v1"]
    assert [p.attributes["messaging.batch.message_count"] for p in polls] == [8, 8, len(records) - 17]  # the last poll's end record is no run's
    assert all(p.parent.span_id == run.context.span_id for p in polls)
    assert [p.attributes["messaging.kafka.offset"] for p in polls] == [0, 8, 16]


def test_poll_duration_and_end_to_end_delay_are_recorded_per_poll() -> None:
    """One poll-duration point per poll; one delay point per partition per poll (its oldest record)."""
    reader = InMemoryMetricReader()
    t = setup_telemetry(metric_reader=reader, install_global=False, env={})
    try:
        traces, normalizer = NormalizerTelemetry(t, group_id="g"), Normalizer(translators=translator_for)
        now_ms = int(__import__("time").time() * 1000)
        records = [r._replace(timestamp=now_ms - 2000 + i, partition=i % 2) for i, r in enumerate(_records()[:6])]
        with traces.batch(records) as trace:
            trace.stepped(_steps(normalizer, records))
            trace.acknowledged()
        points = {m.name: m.data.data_points for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    finally:
        t.log_guard.uninstall()
    [duration] = points["reasonwire.poll.duration"]
    [delay] = points["reasonwire.record.delay"]
    assert duration.count == 1 and duration.sum < 5
    assert delay.count == 2 and 3.9 < delay.sum < 10  # two partitions, each ~2 s old
