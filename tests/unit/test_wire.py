"""The fast wire encoder gives exactly pydantic's AG-UI 1.0 wire bytes (camelCase, no nulls)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ag_ui.core import CustomEvent, RunFinishedEvent, RunStartedEvent, TokenUsage
from ag_ui.core.events import RunFinishedSuccessOutcome

from contracts.grammars import Grammar
from tests.conformance.oracle import fixture_paths
from workers.core.wire import event_json, record_json
from workers.sse import read_events
from workers.translators import implemented, translator_for

FIXTURES = [p for p in fixture_paths() if Grammar(p.parent.name) in implemented()]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_output_of_every_fixture_encodes_exactly_like_pydantic(path: Path) -> None:
    translator = translator_for(path.parent.name)
    with path.open() as f:
        outputs = [translator.feed(e.data) for e in read_events(f)] + [translator.finish()]
    events = [e for o in outputs for e in o.events]
    records = [r for o in outputs for r in o.artefacts] + [translator.usage_record(tenant="t")]
    for event in events:
        assert event_json(event) == event.model_dump_json(by_alias=True, exclude_none=True).encode()
    for record in records:
        assert record_json(record) == record.model_dump_json(by_alias=True, exclude_none=True).encode()


def test_nested_models_nulls_in_metadata_and_extra_fields_match() -> None:
    samples = [
        RunStartedEvent(thread_id="t", run_id="r", metadata={"kept": None, "n": [1, None]}),
        RunFinishedEvent(
            thread_id="t",
            run_id="r",
            outcome=RunFinishedSuccessOutcome(pending_tool_call_ids=["a"]),
            usage=[TokenUsage(provider="p", input_tokens=1, output_tokens=0)],
        ),
        CustomEvent(name="x", value=None),
        CustomEvent(name="x", value={"deep": {"é": "ü\n\"q\""}}, extra_field="kept"),
    ]
    for event in samples:
        assert event_json(event) == event.model_dump_json(by_alias=True, exclude_none=True).encode()
