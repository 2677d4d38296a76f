"""The consumer side of the draft AG-UI reasoning chapter: AG-UI events in, messages held.

Theory of operation
-------------------
:class:`AgUiConsumer` is a plain object fed one AG-UI event at a time (a wire
dict, camelCase) that keeps the conversation the events describe — the
``messages`` a client would send as the next ``RunAgentInput.messages`` —
with every encrypted value stored on the message or tool call it names. No
I/O: a service that already speaks AG-UI and publishes events for reasonwire
to store feeds them here and persists what :meth:`AgUiConsumer.values` reports;
tests build a client's history with it.

Messages are built the way AG-UI clients apply events: a text, reasoning or
tool-result event opens a message; ``TOOL_CALL_START`` adds a call to the
message its ``parentMessageId`` names, or opens an assistant message for it;
content and argument deltas append; an end event's ``metadata`` is merged in (a ``parentMessageId`` naming a message that is not an
assistant message — a reasoning message, say — is warned about and the call filed under an
assistant message of its own id, as ``@ag-ui/client`` does). The start event's ``metadata`` is kept on
the message or call it opens (reasonwire puts continuity hints there, e.g.
OpenAI item ids — see :func:`reasonwire.workers.replay.core.metadata_hint`).

The rules of the chapter, each where it belongs:

* R3 — an ``encryptedValue`` is stored as received and returned unmodified:
  never parsed, trimmed, logged or put in a warning. Its AG-UI 1.1
  ``encryptedValueType``, when the event carries one, is kept beside it on the
  message or call (in either version) and goes whenever the value goes.
* R4 — a path that cannot carry a value warns: a store limit
  (``max_value_bytes``) that a value exceeds, or a downgrade to a pre-1.0
  message shape (:func:`downgrade_messages`), which has no ``encryptedValue``.
* R5 — ``MESSAGES_SNAPSHOT`` replaces each restated message wholesale, its
  encrypted value included: a restated message without one has its value
  withdrawn, and nothing resurrects it. Messages the consumer added itself
  (:meth:`AgUiConsumer.add_message`) are its own and survive a snapshot; so do
  the held reasoning messages when the snapshot restates no reasoning message at
  all (the reference client's rule: such a snapshot does not speak for reasoning).
* R6 — ``REASONING_ENCRYPTED_VALUE`` naming no known entity, or an activity
  message (which carries no value by schema), is warned about, counted and
  dropped; the run goes on.
* R7 — a malformed known event (a required field missing or mistyped, a
  subtype that is not a string, a delta or argument for a message or call that
  was never opened) is fatal for the run: :attr:`Consumed.fatal` says why,
  later events are ignored, and nothing already held is lost. A subtype that
  *is* a string but not one the schema names is stripped with a warning, which
  removes the event (the subtype is required).

Unknown event types are warned about, counted and skipped (forward
compatibility); events with no conversation content (state, steps, custom,
raw, subagent lifecycle) change nothing here.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    ActivityMessage,
    BaseEvent,
    AssistantMessage,
    DeveloperMessage,
    Event,
    EventType,
    FunctionCall,
    Message,
    ReasoningMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from pydantic import TypeAdapter, ValidationError

from reasonwire.workers.core.arguments import expect, type_name

ENCRYPTED_VALUE_SUBTYPES = frozenset({"message", "tool-call"})
"""The subtypes the 1.0 schema names (``ReasoningEncryptedValueSubtype``)."""

_EVENT: TypeAdapter[Any] = TypeAdapter(Event)
_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
_KNOWN_TYPES = frozenset(t.value for t in EventType)


@dataclass(frozen=True)
class ConsumerWarning:
    """Something dropped, stripped or lost; content-free (P8): codes, ids and reasons only."""

    code: str
    message: str
    event_index: int
    """0-based position of the event among those fed."""


@dataclass
class Consumed:
    """What feeding one event (or several) produced."""

    warnings: list[ConsumerWarning] = field(default_factory=list)
    fatal: str | None = None
    """R7: why the run is over (the adapter emits ``RUN_ERROR`` and dead-letters the event)."""


class _Malformed(Exception):
    """A known event that breaks its schema or references nothing open (R7)."""


class AgUiConsumer:
    """Holds a conversation's messages, encrypted values included, from AG-UI events."""

    def __init__(
        self, *, max_value_bytes: int | None = None, messages: Iterable[Message | Mapping[str, Any]] | None = None
    ) -> None:
        if max_value_bytes is not None:
            expect(max_value_bytes, int, name="max_value_bytes", accepts="a number of bytes (int) or None")
            if max_value_bytes < 0:
                raise ValueError(f"max_value_bytes must be 0 or more, not {max_value_bytes}")
        self.max_value_bytes = max_value_bytes
        """The store's limit for one encrypted value; a longer value cannot be kept (R4)."""
        self.messages: list[Message] = _message_models(messages, name="messages")
        self.counters: Counter[str] = Counter()
        self.failed: str | None = None
        self._own: list[str] = []
        self._index = -1
        self._warnings: list[ConsumerWarning] = []
        self._chunked_reasoning: str | None = None
        self._chunked_text: str | None = None
        self._chunked_call: str | None = None
        """The message / call the last ``*_CHUNK`` event extended: later chunks may omit their id."""

    # -- feeding ---------------------------------------------------------------------

    def feed(self, event: Mapping[str, Any] | BaseEvent) -> Consumed:
        """Apply one AG-UI event: a wire dict (camelCase, as on the topic) or an ``ag_ui.core`` event.

        Anything else (a JSON line not yet parsed, None) raises ``TypeError`` and changes nothing:
        R7's "malformed event ends the run" is about what a producer sent, not a caller's mistake."""
        if isinstance(event, BaseEvent):
            event = event.model_dump(mode="json", by_alias=True, exclude_none=True)
        elif not isinstance(event, Mapping):
            hint = " (parse the JSON line first: json.loads)" if isinstance(event, str | bytes) else ""
            raise TypeError(f"feed() takes one AG-UI event as a dict or an ag_ui.core event, not {type_name(event)}{hint}")
        self._index += 1
        if self.failed is not None:
            self.counters["events_after_fatal"] += 1
            return Consumed()
        try:
            self._apply(event)
        except _Malformed as exc:
            self.failed = str(exc)
            self.counters["malformed_events"] += 1
            return Consumed(self._take(), fatal=self.failed)
        return Consumed(self._take())

    def feed_all(self, events: Iterable[Mapping[str, Any]]) -> Consumed:
        """Apply events in order; the warnings of all, and the first fatal reason if any."""
        if isinstance(events, Mapping | str | bytes) or not isinstance(events, Iterable):
            raise TypeError(f"feed_all() takes an iterable of AG-UI events, not {type_name(events)} (one event: feed())")
        out = Consumed()
        for event in events:
            step = self.feed(event)
            out.warnings += step.warnings
            out.fatal = out.fatal or step.fatal
        return out

    def add_message(self, message: Message | Mapping[str, Any]) -> None:
        """A message of the consumer's own (e.g. the user's next input): kept across snapshots.

        An ``ag_ui.core`` message or its wire dict; anything else raises ``TypeError``, a dict that
        is not an AG-UI 1.0 message ``ValueError`` naming the problem."""
        model = _message_models([message], name="message")[0]
        self.messages.append(model)
        self._own.append(model.id)

    # -- what is held ---------------------------------------------------------------------

    def wire_messages(self) -> list[dict[str, Any]]:
        """The messages in AG-UI 1.0 wire shape (camelCase, absent optionals omitted)."""
        return [m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in self.messages]

    def run_input(self, *, thread_id: str, run_id: str) -> dict[str, Any]:
        """The next ``RunAgentInput`` (wire shape) carrying the held messages back."""
        return {"threadId": thread_id, "runId": run_id, "messages": self.wire_messages()}

    def values(self) -> dict[str, str]:
        """Entity id → encrypted value, for every message and tool call holding one now."""
        held: dict[str, str] = {}
        for message in self.messages:
            value = getattr(message, "encrypted_value", None)
            if value is not None:
                held[message.id] = value
            for call in _calls(message):
                if call.encrypted_value is not None:
                    held[call.id] = call.encrypted_value
        return held

    # -- dispatch -----------------------------------------------------------------------

    def _apply(self, raw: Mapping[str, Any]) -> None:
        kind = raw.get("type") if isinstance(raw, Mapping) else None
        if not isinstance(kind, str):
            raise _Malformed("event without a string 'type'")
        if kind not in _KNOWN_TYPES:
            self._warn("unknown_event", f"unknown AG-UI event type {kind!r} skipped")
            return
        if kind == EventType.REASONING_ENCRYPTED_VALUE.value and not self._subtype_recognised(raw):
            return
        try:
            event = _EVENT.validate_python(raw)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"][1:]) or "event"
            raise _Malformed(f"malformed {kind}: {where}: {error['msg']}") from None
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, event)

    def _subtype_recognised(self, raw: Mapping[str, Any]) -> bool:
        """R7: a non-string subtype is malformed; an unknown string subtype strips the event."""
        subtype = raw.get("subtype")
        if not isinstance(subtype, str):
            raise _Malformed("malformed REASONING_ENCRYPTED_VALUE: subtype missing or not a string")
        if subtype in ENCRYPTED_VALUE_SUBTYPES:
            return True
        self._warn(
            "unrecognised_subtype",
            f"REASONING_ENCRYPTED_VALUE with unrecognised subtype {subtype!r} stripped: event removed (R7)",
        )
        return False

    # -- text messages ------------------------------------------------------------------

    def _text_start(self, event: Any) -> None:
        self._open_text(event.message_id, event.role or "assistant", event.metadata)

    def _text_content(self, event: Any) -> None:
        message = self._message(event.message_id, event.type.value)
        message.content = (message.content or "") + event.delta

    def _text_chunk(self, event: Any) -> None:
        message_id = event.message_id or self._chunked_text
        if message_id is None:
            raise _Malformed("malformed TEXT_MESSAGE_CHUNK: the first chunk carries no messageId")
        if self._find(message_id) is None:
            self._open_text(message_id, event.role or "assistant", event.metadata)
        self._chunked_text = message_id
        if event.delta:
            message = self._message(message_id, event.type.value)
            message.content = (message.content or "") + event.delta

    def _open_text(self, message_id: str, role: str, metadata: Any) -> None:
        cls = _TEXT_ROLES[role]
        self._append(cls(id=message_id, content="", metadata=copy.deepcopy(metadata)))

    # -- reasoning messages -----------------------------------------------------------------

    def _reasoning_start(self, event: Any) -> None:
        self._append(ReasoningMessage(id=event.message_id, content="", metadata=copy.deepcopy(event.metadata)))

    def _reasoning_content(self, event: Any) -> None:
        message = self._find(event.message_id)
        if not isinstance(message, ReasoningMessage):
            # The chapter does not require consumers to detect reasoning discipline violations.
            self._warn("orphan_reasoning_delta", f"reasoning delta for unknown message {event.message_id} dropped")
            return
        message.content += event.delta

    def _reasoning_chunk(self, event: Any) -> None:
        message_id = event.message_id or self._chunked_reasoning
        if message_id is None:
            raise _Malformed("malformed REASONING_MESSAGE_CHUNK: the first chunk carries no messageId")
        if self._find(message_id) is None:
            self._append(ReasoningMessage(id=message_id, content="", metadata=copy.deepcopy(event.metadata)))
        self._chunked_reasoning = message_id
        message = self._find(message_id)
        if event.delta and isinstance(message, ReasoningMessage):
            message.content += event.delta

    # -- tool calls -------------------------------------------------------------------------

    def _call_start(self, event: Any) -> None:
        self._open_call(event.tool_call_id, event.tool_call_name, event.parent_message_id, event.metadata)

    def _call_args(self, event: Any) -> None:
        call = self._call(event.tool_call_id, event.type.value)
        call.function.arguments += event.delta

    def _call_chunk(self, event: Any) -> None:
        call_id = event.tool_call_id or self._chunked_call
        if call_id is None:
            raise _Malformed("malformed TOOL_CALL_CHUNK: the first chunk carries no toolCallId")
        if self._find_call(call_id) is None:
            if event.tool_call_name is None:
                raise _Malformed("malformed TOOL_CALL_CHUNK: the first chunk of a call carries no toolCallName")
            self._open_call(call_id, event.tool_call_name, event.parent_message_id, event.metadata)
        self._chunked_call = call_id
        if event.delta:
            self._call(call_id, event.type.value).function.arguments += event.delta

    def _open_call(self, call_id: str, name: str, parent_id: str | None, metadata: Any) -> None:
        parent = self._find(parent_id) if parent_id else None
        if parent is not None and not isinstance(parent, AssistantMessage):
            # parentMessageId is optional and names a message of another role (e.g. the reasoning
            # message before the call): a valid event, so not fatal (R7 is for malformed ones). As the
            # reference @ag-ui/client does, warn and file the call under an assistant message of its
            # own id.
            role = getattr(parent, "role", type(parent).__name__)
            self._warn(
                "parent_not_assistant",
                f"TOOL_CALL_START {call_id}: parentMessageId {parent_id} names a {role} message, not an "
                "assistant message: the call is filed under its own id",
            )
            parent = AssistantMessage(id=call_id, tool_calls=[])
            self._append(parent)
        elif not isinstance(parent, AssistantMessage):
            last = self.messages[-1] if self.messages else None
            if parent_id is None or not (isinstance(last, AssistantMessage) and last.id == parent_id):
                parent = AssistantMessage(id=parent_id or call_id, tool_calls=[])
                self._append(parent)
            else:
                parent = last
        call = ToolCall(id=call_id, function=FunctionCall(name=name, arguments=""), metadata=copy.deepcopy(metadata))
        parent.tool_calls = [*(parent.tool_calls or []), call]

    def _call_result(self, event: Any) -> None:
        self._append(ToolMessage(id=event.message_id, tool_call_id=event.tool_call_id, content=copy.deepcopy(event.content)))

    # -- encrypted values (R3, R4, R6) ---------------------------------------------------------

    def _encrypted_value(self, event: Any) -> None:
        subtype, entity_id, value = str(getattr(event.subtype, "value", event.subtype)), event.entity_id, event.encrypted_value
        target: Any
        if subtype == "message":
            target = self._find(entity_id)
            if isinstance(target, ActivityMessage):
                target = None  # activity messages carry no encrypted value by schema: names nothing we know
        else:
            target = self._find_call(entity_id)
        if target is None:
            self._warn("unknown_entity", f"encrypted value for unknown {subtype} {entity_id} dropped (R6)")
            return
        target.encrypted_value = self._storable(value, entity_id)
        set_value_type(target, (event.model_extra or {}).get(VALUE_TYPE))

    def _storable(self, value: str, entity_id: str) -> str | None:
        """The value, or None when the store cannot carry it (R4: losing content is said)."""
        if self.max_value_bytes is not None and len(value.encode()) > self.max_value_bytes:
            self.counters["lost_encrypted_values"] += 1
            self._warn(
                "value_not_stored",
                f"encrypted value of {entity_id} ({len(value.encode())} bytes) exceeds the store's "
                f"{self.max_value_bytes}-byte limit: not kept (R4)",
            )
            return None
        return value

    # -- snapshots (R5) and activities -----------------------------------------------------------

    def _snapshot(self, event: Any) -> None:
        before = self.values()
        restated = [copy.deepcopy(m) for m in event.messages]
        restated_ids = {m.id for m in restated}
        own = [m for m in self.messages if m.id in self._own and m.id not in restated_ids]
        self.messages = _keep_unrestated_reasoning(self.messages, restated + own)
        for message in self.messages:
            value = getattr(message, "encrypted_value", None)
            if value is not None:
                message.encrypted_value = self._storable(value, message.id)  # type: ignore[union-attr]
            if not isinstance(message, ActivityMessage):
                set_value_type(message, value_type(message))
            for call in _calls(message):
                if call.encrypted_value is not None:
                    call.encrypted_value = self._storable(call.encrypted_value, call.id)
                set_value_type(call, value_type(call))
        after = self.values()
        withdrawn = [entity for entity in before if entity not in after]
        self.counters["withdrawn_encrypted_values"] += len(withdrawn)  # R5: the producer's call, not a loss

    def _activity_snapshot(self, event: Any) -> None:
        existing = self._find(event.message_id)
        if existing is not None and not isinstance(existing, ActivityMessage):
            self._warn("activity_id_clash", f"activity snapshot names non-activity message {event.message_id}: skipped")
            return
        if isinstance(existing, ActivityMessage) and event.replace is False:
            existing.content = {**existing.content, **event.content}
            return
        activity = ActivityMessage(id=event.message_id, activity_type=event.activity_type, content=copy.deepcopy(event.content))
        if existing is None:
            self._append(activity)
        else:
            self.messages[self.messages.index(existing)] = activity

    def _activity_delta(self, event: Any) -> None:
        self.counters["activity_deltas_not_applied"] += 1

    def _end(self, event: Any) -> None:
        """An end event's ``metadata`` joins what the start event put on the message or call, as
        ``@ag-ui/client`` merges it: reasonwire marks a unit an abnormal end cut off
        (``reasonwire.incomplete``), and replay leaves such partial reasoning out.
        Our namespace is merged one level deeper, so the start's continuity hints stay."""
        if not event.metadata:
            return
        call_id = getattr(event, "tool_call_id", None)
        target: Any = self._find_call(call_id) if call_id is not None else self._find(event.message_id)
        if target is not None and not isinstance(target, ActivityMessage):
            target.metadata = _merged(target.metadata, event.metadata)

    def _ignored(self, event: Any) -> None:
        """No conversation content (lifecycle, spans, state, steps, custom, raw, subagents)."""

    # -- lookups ----------------------------------------------------------------------------

    def _append(self, message: Message) -> None:
        if self._find(message.id) is not None:
            raise _Malformed(f"malformed event: message id {message.id} is already in use")
        self.messages.append(message)

    def _find(self, message_id: str | None) -> Message | None:
        for message in reversed(self.messages):
            if message.id == message_id:
                return message
        return None

    def _find_call(self, call_id: str) -> ToolCall | None:
        for message in reversed(self.messages):
            for call in _calls(message):
                if call.id == call_id:
                    return call
        return None

    def _message(self, message_id: str, kind: str) -> Any:
        message = self._find(message_id)
        if message is None or isinstance(message, ActivityMessage | ToolMessage | ReasoningMessage):
            raise _Malformed(f"malformed {kind}: message {message_id} was never started")
        return message

    def _call(self, call_id: str, kind: str) -> ToolCall:
        call = self._find_call(call_id)
        if call is None:
            raise _Malformed(f"malformed {kind}: tool call {call_id} was never started")
        return call

    def _warn(self, code: str, message: str) -> None:
        self.counters[code] += 1
        self._warnings.append(ConsumerWarning(code, message, self._index))

    def _take(self) -> list[ConsumerWarning]:
        out, self._warnings = self._warnings, []
        return out


_MESSAGE_TYPES = (
    ActivityMessage, AssistantMessage, DeveloperMessage, ReasoningMessage, SystemMessage, ToolMessage, UserMessage
)


def _message_models(messages: Any, *, name: str) -> list[Message]:
    """AG-UI 1.0 message models from models or wire dicts; a clear error naming ``name`` otherwise."""
    if messages is None:
        return []
    if name == "messages" and (isinstance(messages, Mapping | str | bytes) or not isinstance(messages, Iterable)):
        raise TypeError(f"messages must be a list of AG-UI messages (models or wire dicts), not {type_name(messages)}")
    models: list[Message] = []
    for index, message in enumerate(messages):
        where = name if name == "message" else f"{name}[{index}]"
        if isinstance(message, _MESSAGE_TYPES):
            models.append(message)
        elif isinstance(message, Mapping):
            try:
                models.append(_MESSAGES.validate_python([message])[0])
            except ValidationError as exc:
                error = exc.errors()[0]
                field = ".".join(str(p) for p in error["loc"][2:]) or "message"
                raise ValueError(f"{where} is not an AG-UI 1.0 message ({field}: {error['msg']})") from None
        else:
            raise TypeError(f"{where} must be an AG-UI message (an ag_ui.core message or its wire dict), not {type_name(message)}")
    return models


def _merged(held: Mapping[str, Any] | None, incoming: Mapping[str, Any]) -> dict[str, Any]:
    merged = {**copy.deepcopy(dict(held or {})), **copy.deepcopy(dict(incoming))}
    ours, theirs = (held or {}).get("reasonwire"), incoming.get("reasonwire")
    if isinstance(ours, Mapping) and isinstance(theirs, Mapping):
        merged["reasonwire"] = {**copy.deepcopy(dict(ours)), **copy.deepcopy(dict(theirs))}
    return merged


def _keep_unrestated_reasoning(before: list[Message], after: list[Message]) -> list[Message]:
    """A snapshot that restates no reasoning message at all does not speak for reasoning (most
    producers' snapshots carry user, assistant and tool messages only): the held reasoning
    messages stay, values included, each before the message that followed it — what the
    reference ``@ag-ui/client`` does. A snapshot that restates any reasoning message is
    authoritative for reasoning too, and those it omits are gone (R5). See docs/replay.md."""
    if any(isinstance(m, ReasoningMessage) for m in after):
        return after
    kept = list(after)
    ids = {m.id for m in after}
    for index, message in enumerate(before):
        if not isinstance(message, ReasoningMessage) or message.id in ids:
            continue
        follower = next((m.id for m in before[index + 1 :] if m.id in ids), None)
        at = next((i for i, m in enumerate(kept) if m.id == follower), len(kept))
        kept.insert(at, message)
        ids.add(message.id)
    return kept


VALUE_TYPE = "encryptedValueType"
"""AG-UI 1.1 (PR #2888): what an ``encryptedValue`` is, set by its producer. Kept on input in both
versions (the 1.0 models hold it as an extra field), stored and returned with the value
unmodified, and replaced or removed together with it: never a type without a value."""


def value_type(holder: Any) -> str | None:
    """The ``encryptedValueType`` a message, tool call or event carries, if a string."""
    kind = (getattr(holder, "model_extra", None) or {}).get(VALUE_TYPE)
    return kind if isinstance(kind, str) else None


def set_value_type(holder: Any, kind: Any) -> None:
    """Give ``holder`` the type of the value it now holds: ``kind`` when it holds a value and
    ``kind`` is a string, else none (a type never outlives or precedes its value)."""
    extra = getattr(holder, "__pydantic_extra__", None)
    if getattr(holder, "encrypted_value", None) is not None and isinstance(kind, str):
        setattr(holder, VALUE_TYPE, kind)
    elif extra:
        extra.pop(VALUE_TYPE, None)


def _calls(message: Message) -> list[ToolCall]:
    return list(message.tool_calls or []) if isinstance(message, AssistantMessage) else []


_TEXT_ROLES: dict[str, type[Any]] = {
    "assistant": AssistantMessage,
    "user": UserMessage,
    "system": SystemMessage,
    "developer": DeveloperMessage,
}

_HANDLERS: dict[str, Callable[[AgUiConsumer, Any], None]] = {
    EventType.TEXT_MESSAGE_START.value: AgUiConsumer._text_start,
    EventType.TEXT_MESSAGE_CONTENT.value: AgUiConsumer._text_content,
    EventType.TEXT_MESSAGE_END.value: AgUiConsumer._end,
    EventType.TEXT_MESSAGE_CHUNK.value: AgUiConsumer._text_chunk,
    EventType.TOOL_CALL_START.value: AgUiConsumer._call_start,
    EventType.TOOL_CALL_ARGS.value: AgUiConsumer._call_args,
    EventType.TOOL_CALL_END.value: AgUiConsumer._end,
    EventType.TOOL_CALL_CHUNK.value: AgUiConsumer._call_chunk,
    EventType.TOOL_CALL_RESULT.value: AgUiConsumer._call_result,
    EventType.REASONING_START.value: AgUiConsumer._ignored,
    EventType.REASONING_MESSAGE_START.value: AgUiConsumer._reasoning_start,
    EventType.REASONING_MESSAGE_CONTENT.value: AgUiConsumer._reasoning_content,
    EventType.REASONING_MESSAGE_END.value: AgUiConsumer._end,
    EventType.REASONING_MESSAGE_CHUNK.value: AgUiConsumer._reasoning_chunk,
    EventType.REASONING_END.value: AgUiConsumer._ignored,
    EventType.REASONING_ENCRYPTED_VALUE.value: AgUiConsumer._encrypted_value,
    EventType.MESSAGES_SNAPSHOT.value: AgUiConsumer._snapshot,
    EventType.ACTIVITY_SNAPSHOT.value: AgUiConsumer._activity_snapshot,
    EventType.ACTIVITY_DELTA.value: AgUiConsumer._activity_delta,
}
"""Event type → handler. Known types not listed carry no conversation content."""


PRE_1_0 = "0"
"""Protocol versions before 1.0 (``0.x``) have no ``encryptedValue`` on messages or calls."""


def downgrade_messages(
    messages: Iterable[Message], protocol_version: str
) -> tuple[list[dict[str, Any]], list[ConsumerWarning]]:
    """Messages in the wire shape of ``protocol_version``. Before 1.0 the schema cannot carry
    an encrypted value: each one dropped is warned about — the path is losing content (R4)."""
    out: list[dict[str, Any]] = []
    warnings: list[ConsumerWarning] = []
    legacy = protocol_version.split(".")[0] == PRE_1_0
    typed = _at_least(protocol_version, (1, 1))
    for index, message in enumerate(messages):
        wire = message.model_dump(mode="json", by_alias=True, exclude_none=True)
        if not typed:  # a 1.1 addition: a 1.0 schema is closed, and its peer strips it anyway
            wire.pop(VALUE_TYPE, None)
            for call in wire.get("toolCalls") or []:
                call.pop(VALUE_TYPE, None)
        if legacy:
            if wire.pop("encryptedValue", None) is not None:
                warnings.append(_lost(message.id, protocol_version, index))
            for call in wire.get("toolCalls") or []:
                if call.pop("encryptedValue", None) is not None:
                    warnings.append(_lost(call["id"], protocol_version, index))
        out.append(wire)
    return out, warnings


def _at_least(version: str, floor: tuple[int, int]) -> bool:
    parts = version.split(".")
    try:
        return (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0) >= floor
    except ValueError:
        return False


def _lost(entity_id: str, version: str, index: int) -> ConsumerWarning:
    return ConsumerWarning(
        "value_lost_in_downgrade",
        f"AG-UI {version} cannot carry the encrypted value of {entity_id}: dropped, the conversation "
        "loses that reasoning state (R4)",
        index,
    )
