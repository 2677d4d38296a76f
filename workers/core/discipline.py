"""Producer discipline for one AG-UI run: the only place that opens and closes anything.

Theory of operation
-------------------
A translator never builds a lifecycle event itself. It names the provider unit it
is working on with a *key* of its own (``("block", 3)``, ``("item", "rs_…")``) and
asks this object to open, extend or close it; the discipline maps keys to AG-UI
ids and keeps the bookkeeping that makes the stream valid by construction:

* R1 spans: a span key or id that is open cannot be opened again; every span is
  closed before ``RUN_FINISHED`` / ``RUN_ERROR``; closing something that is not
  open is refused. A span may hold several reasoning messages; closing a span
  closes its messages first.
* R2 messages: reasoning messages are ``START``/``CONTENT``/``END`` with role
  ``reasoning`` inside an open span; empty deltas are dropped, never emitted.
* ids are unique within the run (an id once used is never reused, AGUI104/205),
  and a ``REASONING_ENCRYPTED_VALUE`` may only name an entity this run opened.
* after the terminal event nothing more is emitted.

Events are built by ``reasonwire.workers.core.events`` as AG-UI wire dicts, so what this
object emits is what goes on the topic.

A unit closed because the run ended abnormally — or because the provider
finished the run by cutting it (a token limit: ``finish_run(truncated=True)``) —
carries ``metadata.reasonwire.incomplete = true`` on its end event, so a consumer
can tell partial reasoning or text from a finished one.

A request that would break a rule raises :class:`DisciplineViolation`; the
translator turns that into ``RUN_ERROR`` (see ``reasonwire.workers.core.translator``), so
even a provider stream that breaks its own grammar yields a valid AG-UI stream.

Tool calls whose arguments are not complete JSON when a run fails are left
unterminated rather than ended: ``TOOL_CALL_END`` asserts the arguments are
whole (AGUI204), and an interrupted call's arguments are not. They are listed
on the ``RUN_ERROR`` metadata instead (``reasonwire.incompleteToolCallIds``).
The same holds when the provider *ends* a call whose arguments are cut off (a
block that stops at ``max_tokens`` mid-arguments): the call is set aside
unterminated, and since AG-UI can neither end it nor finish a run with it open,
the run cannot end with ``RUN_FINISHED`` — the translator ends it with
``RUN_ERROR`` (see :meth:`StreamDiscipline.cut_off_tool_calls`). A call that
streamed no arguments at all is a no-argument call and ends normally.
Completeness is strict JSON within ``reasonwire.workers.core.limits.MAX_NESTING``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from reasonwire.contracts.artefacts import ArtefactSubtype
from reasonwire.workers.core import events as ev
from reasonwire.workers.core.events import WireEvent
from reasonwire.workers.core.surrogates import REPLACEMENT, split_high, whole
from reasonwire.workers.core.limits import complete_json

METADATA_KEY = "reasonwire"
"""Our namespace inside AG-UI ``metadata`` (the key ``ag-ui`` is reserved by the protocol)."""


class DisciplineViolation(Exception):
    """A request that would make the AG-UI stream break R1/R2; the run fails instead."""


class UnitKind(Enum):
    SPAN = "span"
    REASONING = "reasoning message"
    TEXT = "text message"
    TOOL_CALL = "tool call"


@dataclass
class _OpenUnit:
    kind: UnitKind
    agui_id: str
    parent: Hashable | None = None
    args: list[str] = field(default_factory=list)  # tool calls only: to judge completeness
    half: str = ""  # a high surrogate waiting for its partner in the next delta
    children: list[Hashable] = field(default_factory=list)  # spans only: their reasoning messages' keys


class RunPhase(Enum):
    NOT_STARTED = "not started"
    RUNNING = "running"
    ENDED = "ended"


class StreamDiscipline:
    """Owns run, span, message and tool-call bookkeeping for one run (R1, R2)."""

    def __init__(self, *, run_id: str, thread_id: str) -> None:
        self.run_id = run_id
        self.thread_id = thread_id
        self.phase = RunPhase.NOT_STARTED
        self._open: dict[Hashable, _OpenUnit] = {}
        self._used_ids: set[str] = set()
        self._cut_off: list[str] = []
        """Tool calls the provider ended with arguments that are not complete JSON (never ``END``ed)."""
        self._out: list[WireEvent] = []
        self.reasoning_messages = 0
        self.tool_calls = 0
        self.text_messages = 0
        self.text_seen = False
        """Whether visible answer text (a non-empty text delta) has been emitted yet."""
        self.join_surrogates = False
        """Set once an event carried a lone UTF-16 surrogate half: deltas are joined from then on."""

    # -- output ---------------------------------------------------------------

    def drain(self) -> list[WireEvent]:
        """Hand over the events emitted since the last drain."""
        out, self._out = self._out, []
        return out

    def is_open(self, key: Hashable) -> bool:
        return key in self._open

    def agui_id(self, key: Hashable) -> str:
        """The AG-UI id an open unit was given."""
        return self._unit(key, None).agui_id

    def knows_id(self, agui_id: str) -> bool:
        return agui_id in self._used_ids

    # -- run ------------------------------------------------------------------

    def start_run(self, *, metadata: dict[str, Any] | None = None) -> None:
        if self.phase is not RunPhase.NOT_STARTED:
            raise DisciplineViolation(f"run {self.run_id!r} already {self.phase.value}")
        self.phase = RunPhase.RUNNING
        self._out.append(ev.run_started(self.thread_id, self.run_id, _meta(metadata)))

    def finish_run(
        self,
        *,
        usage: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        pending_tool_call_ids: list[str] | None = None,
        truncated: bool = False,
    ) -> None:
        """Close everything still open, then ``RUN_FINISHED`` (R1).

        ``truncated``: the provider ended the run by cutting it off (a token limit), so what is
        still open was cut: closed as incomplete, like any abnormal end; a tool call whose
        arguments are not whole JSON is left unterminated and listed (``incompleteToolCallIds``)."""
        self._require_running()
        incomplete = self._close_all(abnormal=truncated)
        if incomplete:
            metadata = {**(metadata or {}), "incompleteToolCallIds": incomplete}
        self._out.append(
            ev.run_finished(
                self.thread_id,
                self.run_id,
                pending_tool_call_ids=pending_tool_call_ids,
                usage=usage,
                metadata=_meta(metadata),
            )
        )
        self.phase = RunPhase.ENDED

    def fail_run(
        self,
        *,
        message: str,
        code: str,
        usage: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Close what can be closed validly, then ``RUN_ERROR`` (R1, R7)."""
        if self.phase is RunPhase.ENDED:
            raise DisciplineViolation(f"run {self.run_id!r} already ended")
        if self.phase is RunPhase.NOT_STARTED:
            self.start_run()
        incomplete = self._cut_off + self._close_all(abnormal=True)
        extra = dict(metadata or {})
        if incomplete:
            extra["incompleteToolCallIds"] = incomplete
        self._out.append(ev.run_error(message, code, usage=usage, metadata=_meta(extra)))
        self.phase = RunPhase.ENDED

    def abandon_with_error(self, *, message: str, code: str) -> None:
        """Last resort when this bookkeeping itself is broken (the translator's safety net):
        drop what was not handed over yet and end with a bare ``RUN_ERROR``. Units left open
        are the debris of a failed run, which AG-UI tolerates after ``RUN_ERROR``."""
        self._out = [ev.run_error(message, code, usage=None, metadata=None)]
        self.phase = RunPhase.ENDED

    # -- spans and reasoning messages (R1, R2) ---------------------------------

    def open_span(self, key: Hashable, span_id: str) -> None:
        self._open_unit(key, _OpenUnit(UnitKind.SPAN, span_id))
        self._out.append(ev.reasoning_start(span_id))

    def close_span(self, key: Hashable) -> None:
        span = self._unit(key, UnitKind.SPAN)
        for child_key in span.children:  # its own messages only: never a scan of every open unit
            child = self._open.get(child_key)
            if child is not None and child.parent == key:
                self._close(child_key)
        del self._open[key]
        self._out.append(ev.reasoning_end(span.agui_id, None))

    def start_reasoning(
        self,
        key: Hashable,
        message_id: str,
        *,
        span: Hashable,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        parent = self._unit(span, UnitKind.SPAN)
        self._open_unit(key, _OpenUnit(UnitKind.REASONING, message_id, parent=span))
        parent.children.append(key)
        self.reasoning_messages += 1
        self._out.append(ev.reasoning_message_start(message_id, _meta(metadata)))

    def reasoning_content(self, key: Hashable, delta: str) -> None:
        unit = self._open.get(key)  # an open unit implies a running run
        if unit is None or unit.kind is not UnitKind.REASONING:
            unit = self._unit(key, UnitKind.REASONING)  # raises the precise refusal
        if self.join_surrogates:
            delta = _join(unit, delta)
        if delta:  # R2: no empty deltas
            self._out.append(ev.reasoning_message_content(unit.agui_id, delta))

    def end_reasoning(self, key: Hashable, *, incomplete: bool = False) -> None:
        self._unit(key, UnitKind.REASONING)
        self._close(key, incomplete=incomplete)

    def encrypted_value(self, subtype: ArtefactSubtype, entity_id: str, value: str) -> None:
        """``REASONING_ENCRYPTED_VALUE`` naming an entity this run opened (R3, R6)."""
        self._require_running()
        if entity_id not in self._used_ids:
            raise DisciplineViolation(f"encrypted value names unknown {subtype.value} {entity_id!r}")
        self._out.append(ev.reasoning_encrypted_value(subtype.value, entity_id, value))

    # -- answer text ------------------------------------------------------------

    def start_text(self, key: Hashable, message_id: str, *, metadata: dict[str, Any] | None = None) -> None:
        self._open_unit(key, _OpenUnit(UnitKind.TEXT, message_id))
        self.text_messages += 1
        self._out.append(ev.text_message_start(message_id, _meta(metadata)))

    def text_content(self, key: Hashable, delta: str) -> None:
        unit = self._open.get(key)
        if unit is None or unit.kind is not UnitKind.TEXT:
            unit = self._unit(key, UnitKind.TEXT)
        if self.join_surrogates:
            delta = _join(unit, delta)
        if delta:
            self.text_seen = True
            self._out.append(ev.text_message_content(unit.agui_id, delta))

    def end_text(self, key: Hashable, *, incomplete: bool = False) -> None:
        self._unit(key, UnitKind.TEXT)
        self._close(key, incomplete=incomplete)

    # -- tool calls -------------------------------------------------------------

    def start_tool_call(
        self,
        key: Hashable,
        tool_call_id: str,
        name: str,
        *,
        parent_message_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if not tool_call_id or not name:  # AG-UI requires both; an empty one names nothing (R7)
            raise DisciplineViolation(f"tool call {key!r} needs a non-empty id and name")
        self._open_unit(key, _OpenUnit(UnitKind.TOOL_CALL, tool_call_id))
        self.tool_calls += 1
        self._out.append(ev.tool_call_start(tool_call_id, name, parent_message_id, _meta(metadata)))

    def tool_call_args(self, key: Hashable, delta: str) -> None:
        unit = self._open.get(key)
        if unit is None or unit.kind is not UnitKind.TOOL_CALL:
            unit = self._unit(key, UnitKind.TOOL_CALL)
        if self.join_surrogates:
            delta = _join(unit, delta)
        if delta:
            unit.args.append(delta)
            self._out.append(ev.tool_call_args(unit.agui_id, delta))

    def end_tool_call(self, key: Hashable, *, incomplete: bool = False) -> None:
        """``TOOL_CALL_END`` — unless the arguments are cut off: then the call is set aside
        unterminated (AGUI204) and the run can only end in ``RUN_ERROR``."""
        unit = self._unit(key, UnitKind.TOOL_CALL)
        if unit.args and not complete_json("".join(unit.args)):
            del self._open[key]
            self._cut_off.append(unit.agui_id)
            return
        self._close(key, incomplete=incomplete)

    def cut_off_tool_calls(self) -> list[str]:
        """Tool calls that keep the run from finishing: ended with cut-off arguments, or
        still open with arguments that are not complete JSON. Empty when it can finish."""
        still_open = [
            u.agui_id
            for u in self._open.values()
            if u.kind is UnitKind.TOOL_CALL and u.args and not complete_json("".join(u.args))
        ]
        return self._cut_off + still_open

    # -- internals --------------------------------------------------------------

    def _require_running(self) -> None:
        if self.phase is not RunPhase.RUNNING:
            raise DisciplineViolation(f"run {self.run_id!r} is {self.phase.value}")

    def _open_unit(self, key: Hashable, unit: _OpenUnit) -> None:
        self._require_running()
        if key in self._open:
            raise DisciplineViolation(f"{unit.kind.value} {key!r} is already open")
        if unit.agui_id in self._used_ids:
            raise DisciplineViolation(f"id {unit.agui_id!r} was already used in this run")
        self._used_ids.add(unit.agui_id)
        self._open[key] = unit

    def _unit(self, key: Hashable, kind: UnitKind | None) -> _OpenUnit:
        self._require_running()
        unit = self._open.get(key)
        if unit is None:
            raise DisciplineViolation(f"{kind.value if kind else 'unit'} {key!r} is not open")
        if kind is not None and unit.kind is not kind:
            raise DisciplineViolation(f"{key!r} is a {unit.kind.value}, not a {kind.value}")
        return unit

    def _close(self, key: Hashable, *, incomplete: bool = False) -> None:
        """Emit the unit's end event; ``incomplete`` marks a close forced by an abnormal end."""
        unit = self._open.pop(key)
        if unit.half:  # its partner never came: U+FFFD, as a UTF-8 decoder shows a broken character
            self._out.append(_CONTENT_EVENTS[unit.kind](unit.agui_id, REPLACEMENT))
            if unit.kind is UnitKind.TOOL_CALL:
                unit.args.append(REPLACEMENT)
        meta = _meta({"incomplete": True}) if incomplete else None
        self._out.append(_END_EVENTS[unit.kind](unit.agui_id, meta))

    def _close_all(self, *, abnormal: bool) -> list[str]:
        """Close every open unit, innermost first; returns tool calls left unterminated."""
        left_open: list[str] = []
        for key in reversed(list(self._open)):
            unit = self._open[key]
            if abnormal and unit.kind is UnitKind.TOOL_CALL and not complete_json("".join(unit.args)):
                del self._open[key]
                left_open.append(unit.agui_id)
                continue
            self._close(key, incomplete=abnormal)
        return left_open


_END_EVENTS = {
    UnitKind.SPAN: ev.reasoning_end,
    UnitKind.REASONING: ev.reasoning_message_end,
    UnitKind.TEXT: ev.text_message_end,
    UnitKind.TOOL_CALL: ev.tool_call_end,
}


_CONTENT_EVENTS = {
    UnitKind.REASONING: ev.reasoning_message_content,
    UnitKind.TEXT: ev.text_message_content,
    UnitKind.TOOL_CALL: ev.tool_call_args,
}


def _join(unit: _OpenUnit, delta: str) -> str:
    """A delta with its predecessor's waiting half in front, its own trailing half held back,
    and surrogate pairs joined into their characters (``reasonwire.workers.core.surrogates``)."""
    text, unit.half = split_high(unit.half + delta)
    return whole(text)


def _meta(values: dict[str, Any] | None) -> dict[str, Any] | None:
    """Wrap our extra facts under the ``reasonwire`` metadata key, or omit metadata."""
    kept = {k: v for k, v in (values or {}).items() if v is not None}
    return {METADATA_KEY: kept} if kept else None
