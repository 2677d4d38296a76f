"""The core's wire dicts are AG-UI 1.0 events, and encode exactly as the ag_ui models do.

The translators emit events as plain dicts (``reasonwire.workers.core.events``); this is where
the ``ag-ui-protocol`` models hold them to the contract: every event of every
fixture must validate as the ``ag_ui.core.Event`` union, come back from the model
unchanged (no field renamed, added or dropped), and encode to the model's own bytes.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import CustomEvent, RunFinishedEvent, RunStartedEvent, TokenUsage
from ag_ui.core.events import RunFinishedSuccessOutcome

from reasonwire.contracts.grammars import Grammar
from tests.conformance.oracle import fixture_paths
from reasonwire.workers.core.events import as_model
from reasonwire.workers.core.wire import event_json, record_json
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.translators import implemented, translator_for

_MODEL_NAME = {
    "RUN_STARTED": "RunStartedEvent",
    "RUN_FINISHED": "RunFinishedEvent",
    "RUN_ERROR": "RunErrorEvent",
    "REASONING_START": "ReasoningStartEvent",
    "REASONING_END": "ReasoningEndEvent",
    "REASONING_MESSAGE_START": "ReasoningMessageStartEvent",
    "REASONING_MESSAGE_CONTENT": "ReasoningMessageContentEvent",
    "REASONING_MESSAGE_END": "ReasoningMessageEndEvent",
    "REASONING_ENCRYPTED_VALUE": "ReasoningEncryptedValueEvent",
    "TEXT_MESSAGE_START": "TextMessageStartEvent",
    "TEXT_MESSAGE_CONTENT": "TextMessageContentEvent",
    "TEXT_MESSAGE_END": "TextMessageEndEvent",
    "TOOL_CALL_START": "ToolCallStartEvent",
    "TOOL_CALL_ARGS": "ToolCallArgsEvent",
    "TOOL_CALL_END": "ToolCallEndEvent",
}

FIXTURES = [p for p in fixture_paths() if Grammar(p.parent.name) in implemented()]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_output_of_every_fixture_encodes_exactly_like_pydantic(path: Path) -> None:
    translator = translator_for(path.parent.name)
    with path.open() as f:
        outputs = [translator.feed(e.data) for e in read_events(f)] + [translator.finish()]
    events = [e for o in outputs for e in o.events]
    records = [r for o in outputs for r in o.artefacts] + [translator.usage_record(tenant="t")]
    for event in events:
        assert_is_agui_event(event)
    for record in records:
        assert record_json(record) == record.model_dump_json(by_alias=True, exclude_none=True).encode()


def assert_is_agui_event(event: dict[str, Any]) -> None:
    """The wire dict is the AG-UI model it names: validates, declares every key, same bytes."""
    model = as_model(event)
    assert type(model).__name__ == _MODEL_NAME[event["type"]]
    declared = {f.alias or name for name, f in type(model).model_fields.items()}
    assert set(event) <= declared, f"undeclared keys {set(event) - declared}"  # extra="allow" would keep them
    assert model.model_dump(by_alias=True, exclude_none=True, mode="json") == event
    assert event_json(event) == model.model_dump_json(by_alias=True, exclude_none=True).encode()


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "m"},  # delta missing
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x", "parentMessageID": "p"},  # misspelt
        {"type": "TOOL_CALL_START", "toolCallName": "f", "toolCallId": "c"},  # keys out of the model's order
        {"type": "REASONING_MESSAGE_START", "messageId": "m"},  # the model would add role
    ],
)
def test_the_contract_check_refuses_a_dict_that_is_not_the_model(bad: dict[str, Any]) -> None:
    with pytest.raises((AssertionError, ValueError)):
        assert_is_agui_event(bad)



def test_a_refused_event_never_quotes_its_values_R3_P8() -> None:
    secret = "EnCrYpTeD-" + "x" * 40
    with pytest.raises(ValueError) as refused:
        as_model({"type": "REASONING_ENCRYPTED_VALUE", "subtype": 7, "entityId": "m", "encryptedValue": secret})
    # no chained pydantic error at all (it quotes the input): compiled by mypyc, ``raise … from
    # None`` kept it as ``__context__``, and a logged traceback would print it
    assert secret not in str(refused.value) and refused.value.__cause__ is None and refused.value.__context__ is None
    assert secret not in "".join(traceback.format_exception(refused.value))


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
