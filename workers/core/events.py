"""AG-UI 1.0 events as the core emits them: plain dicts already in wire shape.

Why dicts and not the ``ag_ui.core`` models
-------------------------------------------
The AG-UI models of ``ag-ui-protocol`` are the contract: every shape built here
is one of them, field for field, in their declaration order, with absent
optionals omitted — exactly ``Model(...).model_dump(by_alias=True,
exclude_none=True)``. Building a model per event validated our own output a
second time and then needed a Python-level walk to serialize it (ag_ui's
omit-null serializer calls back into Python per model); together that was most
of the translator's CPU (docs/benchmarks.md). So the hot path builds the wire
dict once and ``orjson.dumps`` it, and the contract is enforced where it costs
nothing at run time: ``tests/unit/test_wire.py`` validates every event of every
fixture against the ``ag_ui.core.Event`` union and requires the model's own
serialization to give the same bytes. :func:`as_model` gives the typed model to
a caller that wants one.

This module is the only place that knows the wire field names; the producer
discipline (``reasonwire.workers.core.discipline``) is the only caller, but for
:func:`with_value_types`, which the normalizer and ``translate`` apply when
``RW_AGUI_VERSION`` is 1.1 (the events stay 1.0 otherwise).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from ag_ui.core import BaseEvent, Event
from pydantic import TypeAdapter, ValidationError

from reasonwire.contracts.artefacts import ArtefactRecord, encrypted_value_type

WireEvent = dict[str, Any]
"""One AG-UI event in its 1.0 wire shape (camelCase keys, no nulls)."""

PROTOCOL_VERSION = "1.0"


@cache
def _adapter() -> TypeAdapter[Any]:
    return TypeAdapter(Event)


def as_model(event: WireEvent) -> BaseEvent:
    """The ``ag_ui.core`` model of a wire event, validated (for callers that want types).

    A refusal names fields and error types only: pydantic's own message quotes the input,
    which for ``REASONING_ENCRYPTED_VALUE`` is an opaque value (R3, P8)."""
    try:
        return _adapter().validate_python(event)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['type']}" for e in exc.errors())
    # raised outside the handler, so it has no context at all: compiled by mypyc, ``from None``
    # kept pydantic's error as ``__context__`` and a logged traceback quoted the value (P8)
    raise ValueError(f"not an AG-UI 1.0 event ({problems})")


def _with_meta(kind: str, metadata: dict[str, Any] | None) -> WireEvent:
    """``type`` then ``metadata``: the base fields every AG-UI event starts with, in order."""
    return {"type": kind, "metadata": metadata} if metadata else {"type": kind}


def run_started(thread_id: str, run_id: str, metadata: dict[str, Any] | None) -> WireEvent:
    event = _with_meta("RUN_STARTED", metadata)
    event["threadId"] = thread_id
    event["runId"] = run_id
    event["protocolVersion"] = PROTOCOL_VERSION
    return event


def run_finished(
    thread_id: str,
    run_id: str,
    *,
    pending_tool_call_ids: list[str] | None,
    usage: dict[str, Any] | None,
    metadata: dict[str, Any] | None,
) -> WireEvent:
    event = _with_meta("RUN_FINISHED", metadata)
    event["threadId"] = thread_id
    event["runId"] = run_id
    outcome: dict[str, Any] = {"type": "success"}
    if pending_tool_call_ids:
        outcome["pendingToolCallIds"] = pending_tool_call_ids
    event["outcome"] = outcome
    if usage is not None:
        event["usage"] = [usage]
    return event


def run_error(message: str, code: str, *, usage: dict[str, Any] | None, metadata: dict[str, Any] | None) -> WireEvent:
    event = _with_meta("RUN_ERROR", metadata)
    event["message"] = message
    event["code"] = code
    if usage is not None:
        event["usage"] = [usage]
    return event


def _unit(kind: str, id_field: str, ident: str, metadata: dict[str, Any] | None = None) -> WireEvent:
    """Lifecycle events of a span, message or tool call: base fields, then the unit's id."""
    event = _with_meta(kind, metadata)
    event[id_field] = ident
    return event


def reasoning_start(message_id: str) -> WireEvent:
    return _unit("REASONING_START", "messageId", message_id)


def reasoning_end(message_id: str, metadata: dict[str, Any] | None) -> WireEvent:
    return _unit("REASONING_END", "messageId", message_id, metadata)


def _message_start(kind: str, role: str, message_id: str, metadata: dict[str, Any] | None) -> WireEvent:
    event = _unit(kind, "messageId", message_id, metadata)
    event["role"] = role
    return event


def reasoning_message_start(message_id: str, metadata: dict[str, Any] | None) -> WireEvent:
    return _message_start("REASONING_MESSAGE_START", "reasoning", message_id, metadata)


def reasoning_message_content(message_id: str, delta: str) -> WireEvent:
    # content events are the hot path (one per delta): a literal, no helper call
    return {"type": "REASONING_MESSAGE_CONTENT", "messageId": message_id, "delta": delta}


def reasoning_message_end(message_id: str, metadata: dict[str, Any] | None) -> WireEvent:
    return _unit("REASONING_MESSAGE_END", "messageId", message_id, metadata)


def reasoning_encrypted_value(subtype: str, entity_id: str, value: str) -> WireEvent:
    return {"type": "REASONING_ENCRYPTED_VALUE", "subtype": subtype, "entityId": entity_id, "encryptedValue": value}


def with_value_types(events: list[WireEvent], records: Iterable[ArtefactRecord]) -> list[WireEvent]:
    """AG-UI 1.1: each ``REASONING_ENCRYPTED_VALUE`` with the ``encryptedValueType`` of the record
    it announces (the ledger makes both at once, so they leave the translator together). A value
    whose kind has no type goes without one; a type never goes without its value (PR #2888)."""
    types: dict[tuple[str, str, str], str] = {}
    for record in records:
        kind = encrypted_value_type(record.kind, record.issuer.provider)
        if kind is not None:
            types[(record.subtype.value, record.entity_id, record.value)] = kind
    if not types:
        return events
    out: list[WireEvent] = []
    for event in events:
        typed = types.get((event["subtype"], event["entityId"], event["encryptedValue"])) if event["type"] == "REASONING_ENCRYPTED_VALUE" else None
        out.append({**event, "encryptedValueType": typed} if typed is not None else event)
    return out


def text_message_start(message_id: str, metadata: dict[str, Any] | None) -> WireEvent:
    return _message_start("TEXT_MESSAGE_START", "assistant", message_id, metadata)


def text_message_content(message_id: str, delta: str) -> WireEvent:
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": delta}


def text_message_end(message_id: str, metadata: dict[str, Any] | None) -> WireEvent:
    return _unit("TEXT_MESSAGE_END", "messageId", message_id, metadata)


def tool_call_start(
    tool_call_id: str, name: str, parent_message_id: str | None, metadata: dict[str, Any] | None
) -> WireEvent:
    event = _unit("TOOL_CALL_START", "toolCallId", tool_call_id, metadata)
    event["toolCallName"] = name
    if parent_message_id is not None:
        event["parentMessageId"] = parent_message_id
    return event


def tool_call_args(tool_call_id: str, delta: str) -> WireEvent:
    return {"type": "TOOL_CALL_ARGS", "toolCallId": tool_call_id, "delta": delta}


def tool_call_end(tool_call_id: str, metadata: dict[str, Any] | None) -> WireEvent:
    return _unit("TOOL_CALL_END", "toolCallId", tool_call_id, metadata)


_USAGE_FIELDS = (
    ("provider", "provider"),
    ("model", "model"),
    ("input_tokens", "inputTokens"),
    ("output_tokens", "outputTokens"),
    ("total_tokens", "totalTokens"),
    ("reasoning_tokens", "reasoningTokens"),
    ("cached_input_tokens", "cachedInputTokens"),
    ("cache_write_input_tokens", "cacheWriteInputTokens"),
)


def token_usage(**values: Any) -> dict[str, Any]:
    """AG-UI ``TokenUsage`` in wire shape (snake_case names in, camelCase out, nulls dropped)."""
    return {alias: values[name] for name, alias in _USAGE_FIELDS if values.get(name) is not None}
