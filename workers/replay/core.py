"""The replay core: a client's AG-UI history + stored artefacts → provider-native input.

Theory of operation
-------------------
The next provider request of a stateless conversation must carry the provider's
own opaque reasoning state back, byte for byte, in the provider's own shape
(P5), and only to the issuer that produced it (R8). Two sources hold the
pieces:

* the **client's history** (AG-UI messages as in ``RunAgentInput.messages``):
  what was said and in which order — reasoning messages (id = the messageId
  reasonwire emitted), assistant text, tool calls (ids = the provider's
  tool-call ids, or minted ones for Gemini), tool results, user and system
  messages — plus the ``encryptedValue``\\ s the client kept;
* the **artefact records** (keyed by ``entity_id`` = those AG-UI ids): the opaque
  value exactly as received, its issuer, and the provider-native block it rode
  in with its position (:class:`reasonwire.contracts.artefacts.NativeBlock`).

This module does everything that is the same for every grammar, once:

1. **read** the history (validated AG-UI 1.0 messages; a bad history is an
   :class:`InvalidHistory`, never a guess);
2. **decide which artefacts go back** (:class:`Continuity`): an artefact is left
   out — with a warning and a counter, never sent — when it is incomplete (its
   unit never closed), belongs to another tenant, or was issued by another
   grammar, model family (:mod:`reasonwire.workers.replay.family`) or scope (R8, P5); and
   **which copy wins** when the client's ``encryptedValue`` and the stored one
   differ (see below);
3. **segment** the history into provider turns (:class:`Conversation`):
   instructions, user turns, assistant turns (consecutive reasoning and
   assistant messages, in the client's order — the order the units streamed),
   and tool-result turns; a tool call whose arguments are not a JSON object
   (an interrupted call) is left out with its result; a call the history never
   answers (its run failed or was cut after it) is left out with the reasoning
   that led only to it, a failed run a retry superseded is left out whole, and a
   history ending with a failed run's turn ends at the input that turn answered —
   decided per run (:func:`leave_out_unanswered`); partial reasoning of an
   interrupted run is left out; reasoning units an audience filter hid from the
   client are put back where they streamed (:func:`restore_unseen`);
4. **fail before the call** (:class:`ProviderWouldReject`) when what is left
   would make the provider reject the request: a tool loop is open (the history
   ends with tool results) and a unit of the current turn that the grammar
   requires (e.g. Anthropic's thinking block) has no replayable artefact;
5. hand the conversation to the grammar's builder (one module per grammar in
   this package), which writes the provider-native fragment.

Which copy wins
---------------
The **stored copy decides the bytes; the client decides presence only when it
says it keeps values** (``honour_client_omissions``):

* stored and client copies equal → sent;
* both present, different → the **stored** copy is sent, warning
  ``client_value_differs``: the stored value is the one reasonwire received from
  the issuer, with its issuer and native block; a client copy that differs was
  modified (R3) or came from elsewhere, and nothing vouches for its issuer (R8);
* client copy only (no stored record) → **left out**, warning
  ``unverified_client_value``: no issuer to check, no native block to rebuild;
* stored copy only → sent by default: clients need not keep values (the public
  stream never carries them). With ``honour_client_omissions`` the client is an
  AG-UI consumer that keeps values and applies R5, so a message it holds
  without a value had it withdrawn by a ``MESSAGES_SNAPSHOT`` → **left out**,
  warning ``withdrawn_by_client`` — never resurrected.

Nothing here logs, traces or puts an opaque value in a message (R3, P8).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ag_ui.core import (
    ActivityMessage,
    AssistantMessage,
    DeveloperMessage,
    Message,
    ReasoningMessage,
    RunAgentInput,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from pydantic import TypeAdapter, ValidationError

from reasonwire.contracts.artefacts import ArtefactRecord, ArtefactSubtype
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayTarget
from reasonwire.workers.replay.family import model_family

# -- outcomes ------------------------------------------------------------------------


class ReplayError(Exception):
    """A replay that cannot produce a request. ``code`` is stable; the message names no value (P8)."""

    code: ClassVar[str] = "replay_error"

    def __init__(self, message: str, *, entity_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.entity_id = entity_id


class InvalidHistory(ReplayError, ValueError):
    """The history is not AG-UI 1.0 messages, or holds something replay cannot map."""

    code = "invalid_history"


class ProviderWouldReject(ReplayError):
    """What is left after dropping foreign or missing state would be rejected by the provider."""

    code = "provider_would_reject"


@dataclass(frozen=True)
class ReplayWarning:
    """Something left out or assumed; safe to log (ids and reasons only, P8)."""

    code: str
    message: str
    entity_id: str | None = None


@dataclass
class ReplayLog:
    """Warnings and counters of one replay, shared by the core and the builders."""

    warnings: list[ReplayWarning] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)

    def warn(self, code: str, message: str, *, entity_id: str | None = None) -> None:
        self.warnings.append(ReplayWarning(code, message, entity_id))
        self.counters[code] += 1


@dataclass
class ReplayResult:
    """The provider-native fragment and what was left out on the way."""

    fragment: dict[str, Any]
    warnings: list[ReplayWarning]
    counters: Counter[str]
    replayed: list[str]
    """Entity ids whose artefacts went into ``fragment``, in order (for audit)."""


# -- reading the history ---------------------------------------------------------------

_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def read_history(history: Any) -> tuple[list[Message], str | None]:
    """AG-UI messages and the thread id (None for a bare array) from what the client holds.

    Accepts a ``RunAgentInput`` (model or wire dict) or a ``messages`` array (models
    or wire dicts). Raises :class:`InvalidHistory` naming the problem.
    """
    if isinstance(history, RunAgentInput):
        return list(history.messages), history.thread_id
    if isinstance(history, Mapping):
        if "messages" not in history:
            raise InvalidHistory("history is an object without 'messages': expected a RunAgentInput or a messages array")
        thread_id = history.get("threadId", history.get("thread_id"))
        return _messages(history["messages"]), thread_id if isinstance(thread_id, str) else None
    if isinstance(history, Sequence) and not isinstance(history, str | bytes):
        return _messages(history), None
    raise InvalidHistory(f"history must be a RunAgentInput or a messages array, not {type(history).__name__}")


def _messages(raw: Any) -> list[Message]:
    try:
        return _MESSAGES.validate_python(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'][:3])}: {error['msg']}" for error in exc.errors()[:3]
        )
        raise InvalidHistory(f"history is not AG-UI 1.0 messages ({problems})") from None


# -- which artefacts go back (R8, P5, R3, R5) ---------------------------------------------------


@dataclass
class Exclusion:
    """One artefact (or client value) left out, and why."""

    reason: str
    record: ArtefactRecord | None
    issuer: bool
    """True when left out because another issuer produced it (model change etc.)."""


Entity = tuple[ArtefactSubtype, str]
"""What an artefact names: a message or a tool call (their ids may coincide: a tool-call-only
assistant message takes its call's id), by AG-UI id."""


class Continuity:
    """Decides, once per replay, which stored artefacts go back for each AG-UI entity."""

    def __init__(
        self,
        messages: Sequence[Message],
        records: Iterable[ArtefactRecord],
        target: ReplayTarget,
        log: ReplayLog,
        *,
        tenant: str | None = None,
        honour_client_omissions: bool = False,
        model_bound: Callable[[ArtefactRecord], bool] = lambda record: True,
    ) -> None:
        self.target = target
        self.log = log
        self.model_bound = model_bound
        """Whether a record is bound to its issuer's model family, or only to its provider
        (readable reasoning a provider requires back: any of its models reads it)."""
        self.tenant = tenant
        self.honour_client_omissions = honour_client_omissions
        self._usable: dict[Entity, list[ArtefactRecord]] = {}
        self.excluded: dict[Entity, list[Exclusion]] = defaultdict(list)
        self.client_values = _client_values(messages)
        by_entity: dict[Entity, list[ArtefactRecord]] = defaultdict(list)
        for record in records:
            entity = (record.subtype, record.entity_id)
            if record not in by_entity[entity]:  # an index may list an entity twice
                by_entity[entity].append(record)
        self.model_family = self._target_family(by_entity)
        for entity in _entities(messages):
            self._decide(entity, by_entity.pop(entity, []))
        self.unseen: dict[Entity, list[ArtefactRecord]] = {}
        """Replayable records of entities the client does not hold: units an audience filter hid
        from it (raw or redacted reasoning, opaque-only carriers), or turns it trimmed."""
        for entity, records in by_entity.items():
            usable = [r for r in records if self._problem(r) is None]
            if usable and entity[0] is ArtefactSubtype.MESSAGE and not honour_client_omissions:
                self.unseen[entity] = sorted(usable, key=lambda r: r.native.position)
            else:  # another issuer's, or a client that keeps values and removed the message (R5)
                self.log.counters["artefacts_not_in_history"] += len(records)

    def usable(self, entity: Entity) -> list[ArtefactRecord]:
        """The artefacts of ``entity`` that go back, in provider position order."""
        return self._usable.get(entity, [])

    def had_state(self, entity: Entity) -> bool:
        """Whether the entity carried opaque state at all (stored, excluded or client-held)."""
        return entity in self._usable or entity in self.excluded or entity in self.client_values

    def _target_family(self, by_entity: Mapping[Entity, list[ArtefactRecord]]) -> str | None:
        grammar = self.target.grammar
        if self.target.model is not None:
            return model_family(grammar, self.target.model)
        latest = [
            r
            for records in by_entity.values()
            for r in records
            if r.issuer.grammar == grammar and r.issuer.provider == self.target.provider and r.complete
        ]
        if not latest:
            return None
        newest = max(latest, key=lambda r: r.created_at_ms or 0) if any(r.created_at_ms for r in latest) else latest[-1]
        family = model_family(grammar, newest.issuer.model)
        self.log.warn(
            "model_assumed",
            f"no target model given: assuming model family {family!r}, which produced the thread's latest artefacts",
        )
        return family

    def _decide(self, entity: Entity, records: list[ArtefactRecord]) -> None:
        entity_id = entity[1]
        client_value = self.client_values.get(entity)
        if not records:
            if client_value is not None:
                self._exclude(
                    entity,
                    Exclusion("no stored artefact", None, issuer=False),
                    "unverified_client_value",
                    f"the client holds an encrypted value for {entity_id} but no stored artefact exists: "
                    "its issuer cannot be checked, left out (R8)",
                )
            return
        usable = []
        for record in records:
            problem = self._problem(record)
            if problem is None:
                usable.append(record)
            else:
                code, message, issuer = problem
                self._exclude(entity, Exclusion(code, record, issuer=issuer), code, message)
        if not usable:
            return
        if self.honour_client_omissions and client_value is None:
            for record in usable:
                self._exclude(
                    entity,
                    Exclusion("withdrawn", record, issuer=False),
                    "withdrawn_by_client",
                    f"the client holds {entity_id} without its encrypted value: withdrawn (R5), not resurrected",
                )
            return
        if client_value is not None and all(r.value != client_value for r in usable):
            self.log.warn(
                "client_value_differs",
                f"the client's encrypted value for {entity_id} differs from the stored one: the stored copy is sent",
                entity_id=entity_id,
            )
        self._usable[entity] = sorted(usable, key=lambda r: r.native.position)

    def _problem(self, record: ArtefactRecord) -> tuple[str, str, bool] | None:
        """Why this record may not go to the target (R8, P5), or None."""
        entity, target = record.entity_id, self.target
        if not record.value:  # the provider sent an empty signature: the unit is unsigned (R3)
            return "unsigned_artefact", f"artefact for {entity} is empty (the unit was unsigned): never replayed", False
        if not record.complete:
            return "incomplete_artefact", f"artefact for {entity} is incomplete (its unit never closed): never replayed", False
        if self.tenant is not None and record.tenant is not None and record.tenant != self.tenant:
            return "foreign_tenant", f"artefact for {entity} belongs to another tenant: never crossed", False
        if record.issuer.grammar != target.grammar:
            return (
                "foreign_issuer",
                f"artefact for {entity} was issued by {record.issuer.grammar.value}, "
                f"the target is {target.grammar.value}: left out (R8)",
                True,
            )
        if record.issuer.provider != target.provider:
            return (
                "foreign_issuer",
                f"artefact for {entity} was issued by provider {_provider(record.issuer.provider, target.grammar)}, "
                f"the target is {_provider(target.provider, target.grammar)}: left out (R8)",
                True,
            )
        if record.issuer.scope != target.scope:
            return "foreign_issuer", f"artefact for {entity} was issued under another scope: left out (R8)", True
        if not self.model_bound(record):
            return None
        family = model_family(target.grammar, record.issuer.model)
        if family != self.model_family:
            return (
                "foreign_issuer",
                f"artefact for {entity} was issued by model family {family!r}, the target is {self.model_family!r}: "
                "left out (R8, P5)",
                True,
            )
        return None

    def _exclude(self, entity: Entity, exclusion: Exclusion, code: str, message: str) -> None:
        self.excluded[entity].append(exclusion)
        self.log.warn(code, message, entity_id=entity[1])


def _provider(provider: str | None, grammar: Grammar) -> str:
    """A provider for a warning: ``None`` is the grammar's own (Issuer.provider)."""
    return repr(provider) if provider is not None else f"{grammar.value}'s own"


def _client_values(messages: Sequence[Message]) -> dict[Entity, str]:
    values: dict[Entity, str] = {}
    for message in messages:
        if isinstance(message, ActivityMessage):
            continue
        if message.encrypted_value is not None:
            values[(ArtefactSubtype.MESSAGE, message.id)] = message.encrypted_value
        for call in _tool_calls(message):
            if call.encrypted_value is not None:
                values[(ArtefactSubtype.TOOL_CALL, call.id)] = call.encrypted_value
    return values


def _entities(messages: Sequence[Message]) -> list[Entity]:
    entities: list[Entity] = []
    for message in messages:
        if isinstance(message, ActivityMessage):
            continue
        entities.append((ArtefactSubtype.MESSAGE, message.id))
        entities.extend((ArtefactSubtype.TOOL_CALL, call.id) for call in _tool_calls(message))
    return list(dict.fromkeys(entities))


def _tool_calls(message: Message) -> list[ToolCall]:
    return list(message.tool_calls or []) if isinstance(message, AssistantMessage) else []


# -- the conversation, in provider turns -------------------------------------------------------


@dataclass
class Unit:
    """One piece of an assistant turn with the artefacts that go back with it."""

    entity_id: str
    artefacts: list[ArtefactRecord]
    excluded: list[Exclusion]
    client_value: bool

    def provider_blocks(self) -> list[dict[str, Any]]:
        """The unit's artefacts as the provider-native blocks they came in, values put back."""
        return [record.provider_block() for record in self.artefacts]


@dataclass
class Reasoning(Unit):
    message: ReasoningMessage


@dataclass
class Text(Unit):
    message: AssistantMessage

    @property
    def text(self) -> str:
        return self.message.content or ""


@dataclass
class Call(Unit):
    call: ToolCall
    message: AssistantMessage
    arguments: dict[str, Any]
    """The arguments, parsed once (every grammar but OpenAI sends an object)."""

    @property
    def name(self) -> str:
        return self.call.function.name


@dataclass
class AssistantTurn:
    units: list[Reasoning | Text | Call] = field(default_factory=list)

    @property
    def foreign(self) -> bool:
        """Some of this turn's state came from another issuer (a model change)."""
        return any(e.issuer for unit in self.units for e in unit.excluded)

    @property
    def calls(self) -> list[Call]:
        return [u for u in self.units if isinstance(u, Call)]


@dataclass
class UserTurn:
    message: UserMessage

    @property
    def texts(self) -> list[str]:
        return content_texts(self.message.content, what=f"user message {self.message.id}")

    @property
    def plain(self) -> bool:
        """The client sent a plain string (kept as a string where the grammar allows it)."""
        return isinstance(self.message.content, str)


@dataclass
class ToolResult:
    message: ToolMessage
    call: Call

    @property
    def text(self) -> str:
        return "".join(content_texts(self.message.content, what=f"tool message {self.message.id}"))

    @property
    def failed(self) -> bool:
        return self.message.error is not None

    def value(self) -> Any:
        """The result as JSON when it is JSON, else the text (tools serialise structured data)."""
        try:
            return json.loads(self.text)
        except ValueError:
            return self.text


@dataclass
class ToolResults:
    results: list[ToolResult] = field(default_factory=list)


@dataclass
class Instructions:
    message: SystemMessage | DeveloperMessage


Turn = Instructions | UserTurn | AssistantTurn | ToolResults


@dataclass
class Conversation:
    """The history in provider turns, each unit holding the artefacts that go back with it."""

    turns: list[Turn]
    target: ReplayTarget
    continuity: Continuity
    log: ReplayLog
    calls: dict[str, Call]
    unplaced: list[tuple[AssistantTurn | None, Reasoning]] = field(default_factory=list)
    """Unseen units whose turn is known (or not) but whose place in it is ambiguous."""
    dropped: list[Reasoning | Text | Call] = field(default_factory=list)
    """Units whose state a builder left out after the fact (an OpenAI reasoning item without its follower)."""
    rewritten_ids: dict[str, str] = field(default_factory=dict)
    """Tool-call ids the target grammar does not accept → what they were sent as."""

    def units(self) -> list[Reasoning | Text | Call]:
        return [u for t in self.turns if isinstance(t, AssistantTurn) for u in t.units]

    def drop(self, unit: Reasoning | Text | Call, code: str, message: str) -> None:
        """A builder leaves a unit's state out: warned and counted like any exclusion."""
        self.dropped.append(unit)
        self.log.warn(code, message, entity_id=unit.entity_id)

    @property
    def instructions(self) -> list[str]:
        return [t.message.content for t in self.turns if isinstance(t, Instructions)]

    def current_turns(self) -> list[AssistantTurn]:
        """The assistant turns of an open tool loop (history ends with tool results), else none."""
        if not self.turns or not isinstance(self.turns[-1], ToolResults):
            return []
        current: list[AssistantTurn] = []
        for turn in reversed(self.turns):
            if isinstance(turn, UserTurn):
                break
            if isinstance(turn, AssistantTurn):
                current.append(turn)
        return current[::-1]


def build_conversation(messages: Sequence[Message], continuity: Continuity, log: ReplayLog) -> Conversation:
    turns: list[Turn] = []
    calls: dict[str, Call] = {}
    dropped_calls: set[str] = set()
    cut_runs: set[str] = set()
    """Runs (by :func:`run_key`) that lost a unit to an interruption before their turn was built."""

    def assistant_turn() -> AssistantTurn:
        if not turns or not isinstance(turns[-1], AssistantTurn):
            turns.append(AssistantTurn())
        turn = turns[-1]
        assert isinstance(turn, AssistantTurn)
        return turn

    def unit_state(subtype: ArtefactSubtype, entity_id: str) -> dict[str, Any]:
        entity = (subtype, entity_id)
        return {
            "entity_id": entity_id,
            "artefacts": continuity.usable(entity),
            "excluded": list(continuity.excluded.get(entity, [])),
            "client_value": entity in continuity.client_values,
        }

    for message in messages:
        if isinstance(message, SystemMessage | DeveloperMessage):
            turns.append(Instructions(message))
        elif isinstance(message, UserMessage):
            turns.append(UserTurn(message))
        elif isinstance(message, ReasoningMessage):
            state = unit_state(ArtefactSubtype.MESSAGE, message.id)
            if _interrupted(message, state["artefacts"], state["excluded"]):
                cut_runs.update(_cut_run(Reasoning(message=message, **state), turns))
                log.warn(
                    "interrupted_reasoning",
                    f"reasoning {message.id} was cut off when its run was interrupted (partial, never signed): "
                    "shown to the user, not replayed",
                    entity_id=message.id,
                )
                continue
            assistant_turn().units.append(Reasoning(message=message, **state))
        elif isinstance(message, AssistantMessage):
            turn = assistant_turn()
            if message.content or continuity.had_state((ArtefactSubtype.MESSAGE, message.id)):
                turn.units.append(Text(message=message, **unit_state(ArtefactSubtype.MESSAGE, message.id)))
            for tool_call in message.tool_calls or []:
                arguments = _arguments(tool_call)
                if arguments is None:
                    dropped_calls.add(tool_call.id)
                    state = unit_state(ArtefactSubtype.TOOL_CALL, tool_call.id)
                    cut_runs.update(_cut_run(Call(call=tool_call, message=message, arguments={}, **state), turns))
                    log.warn(
                        "incomplete_tool_call",
                        f"tool call {tool_call.id} has arguments that are not a JSON object (interrupted?): left out",
                        entity_id=tool_call.id,
                    )
                    continue
                state = unit_state(ArtefactSubtype.TOOL_CALL, tool_call.id)
                unit = Call(call=tool_call, message=message, arguments=arguments, **state)
                calls[tool_call.id] = unit
                turn.units.append(unit)
        elif isinstance(message, ToolMessage):
            call = calls.get(message.tool_call_id)
            if call is None:
                why = "an incomplete" if message.tool_call_id in dropped_calls else "no"
                log.warn(
                    "orphan_tool_result",
                    f"tool message {message.id} answers {why} tool call in the history: left out",
                    entity_id=message.id,
                )
                continue
            if not turns or not isinstance(turns[-1], ToolResults):
                turns.append(ToolResults())
            last = turns[-1]
            assert isinstance(last, ToolResults)
            last.results.append(ToolResult(message, call))
        else:  # activity messages are progress, not conversation content
            log.counters["activity_messages_skipped"] += 1
    turns = leave_out_unanswered(turns, calls, log, cut_runs=cut_runs)
    conversation = Conversation(turns, continuity.target, continuity, log, calls)
    restore_unseen(conversation)
    return conversation


def _interrupted(message: ReasoningMessage, artefacts: list[ArtefactRecord], excluded: list[Exclusion]) -> bool:
    """Whether a reasoning message is the partial reasoning of an interrupted run.

    The client says so: reasonwire marks a unit closed by an abnormal end
    (``REASONING_MESSAGE_END.metadata.reasonwire.incomplete``), and a client that keeps event
    metadata on its messages (``@ag-ui/client`` merges it; ``AgUiConsumer`` too) holds the mark.
    Or the store does: every record of the message is incomplete (its unit never closed). Either
    way nothing of it can go back — the provider never signed it — and it is no part of the turn
    a later, retried run produced."""
    if artefacts:
        return False
    if metadata_hint(message.metadata, "incomplete") is True:
        return True
    return bool(excluded) and all(e.reason == "incomplete_artefact" for e in excluded)


def leave_out_unanswered(
    turns: list[Turn], calls: dict[str, Call], log: ReplayLog, *, cut_runs: Iterable[str] = ()
) -> list[Turn]:
    """Tool calls the history never answers, and the runs that failed, left out with what only they
    justified — decided per run, not per merged turn (docs/replay.md, "Failed and interrupted turns").

    A call with no tool message for it — in practice the call of a run that failed or was cut off
    after the call was complete, which the client therefore never ran — cannot go back: every
    provider rejects an assistant call without its result (OpenAI "No tool output found for
    function call", Anthropic "tool_use ids were found without tool_result blocks", Bedrock
    ValidationException; Gemini and Interactions pair each call with its response). So:

    * the call is left out, warned (``unanswered_tool_call``, naming the call id);
    * a run is *failed* when it has such a call or was cut (:func:`failed_runs`). The runs of one
      assistant turn answered the same input — nothing came between them — so a failed run
      followed by another run was superseded by that retry: left out whole (its cut text
      ``interrupted_text``, the rest ``superseded_run``), unless the loop went on from one of its
      calls (answered), when only its cut text goes;
    * in the run that stays, the reasoning that led to its unanswered calls and to nothing else —
      reasoning units left at the end of *that run* once the calls are gone (an OpenAI reasoning
      item whose following item was the call, a Claude thinking block before a ``tool_use``) —
      goes with them (``unanswered_call_reasoning``);
    * when the turn is the last thing in the history and its last run failed (the client retries
      the same messages), the whole turn is left out: the retry produces it again, and what is
      left of it would be a prefilled assistant message the thinking models refuse ("You cannot
      pre-fill responses when thinking is enabled").
    """
    answered = {r.call.entity_id for t in turns if isinstance(t, ToolResults) for r in t.results}
    cut = set(cut_runs)
    kept: list[Turn] = []
    for position, turn in enumerate(turns):
        if not isinstance(turn, AssistantTurn):
            kept.append(turn)
            continue
        unanswered = [u for u in turn.calls if u.entity_id not in answered]
        runs = run_segments(turn)
        failed = failed_runs(runs, unanswered, cut)
        if not failed:
            kept.append(turn)
            continue
        for call in unanswered:
            calls.pop(call.entity_id, None)
            log.warn(
                "unanswered_tool_call",
                f"tool call {call.entity_id} has no result in the history (its run ended before the tool ran): "
                "left out, with what only it justified — the provider rejects a call without its result",
                entity_id=call.entity_id,
            )
        if position == len(turns) - 1 and failed[-1] is runs[-1][1]:
            _leave_out_retried_turn(turn, unanswered, log)
            continue
        units: list[Reasoning | Text | Call] = []
        for index, (_, run) in enumerate(runs):
            mine = [u for u in run if all(u is not c for c in unanswered)]
            if any(run is f for f in failed):
                superseded = index < len(runs) - 1
                mine = _settle_failed_run(mine, had_unanswered=len(mine) < len(run), superseded=superseded, log=log)
            units += mine
        if units:
            kept.append(AssistantTurn(units))
    return kept


MINTED_ROLES = frozenset({"reasoning", "text", "tool"})
"""Roles in the ids translators mint, ``<response or run>:<role>:<unit>`` (``Translator.mint``)."""


def run_key(unit: Reasoning | Text | Call) -> str | None:
    """The provider response (one per run) a unit streamed in, when what the client holds says so.

    The client holds no run id per message (``@ag-ui/client`` keeps none, and ``RUN_ERROR`` leaves
    no trace in its messages), but reasonwire's identity does: the unit's stored records name their
    response and run; a tool call's start-event hint names its response (Anthropic, Bedrock); an id
    reasonwire minted begins with it. None for a unit of unknown origin (a provider call id, a
    message the client wrote)."""
    for record in unit.artefacts + [e.record for e in unit.excluded if e.record is not None]:
        return record.native.response_id or record.run_id
    if isinstance(unit, Call):
        hint = metadata_hint(unit.call.metadata, "responseId")
        if isinstance(hint, str):
            return hint
    head, _, _ = unit.entity_id.rpartition(":")
    prefix, _, role = head.rpartition(":")
    return prefix if prefix and role in MINTED_ROLES else None


def run_segments(turn: AssistantTurn) -> list[tuple[str | None, list[Reasoning | Text | Call]]]:
    """The turn's units by the run that produced them, in order. A run's units are consecutive in
    the client's history (events apply in order), so a unit of unknown origin belongs with the
    unit before it — a call follows its run's reasoning or text."""
    runs: list[tuple[str | None, list[Reasoning | Text | Call]]] = []
    for unit in turn.units:
        key = run_key(unit)
        if runs and (key is None or key == runs[-1][0]):
            runs[-1][1].append(unit)
        else:
            runs.append((key, [unit]))
    return runs


def failed_runs(
    runs: list[tuple[str | None, list[Reasoning | Text | Call]]], unanswered: list[Call], cut: set[str]
) -> list[list[Reasoning | Text | Call]]:
    """The runs (of one turn, :func:`run_segments`) that failed: a call the history never answers, a unit whose end event
    carried reasonwire's ``incomplete`` mark (closed by an abnormal end — ``RUN_ERROR``, a dropped
    connection, a token limit — which ``@ag-ui/client`` and ``AgUiConsumer`` keep on the message),
    or a unit of it left out as cut before (partial reasoning, a call with cut-off arguments)."""
    return [
        run
        for key, run in runs
        if (key is not None and key in cut)
        or any(_incomplete(u) for u in run)
        or any(u is c for u in run for c in unanswered)
    ]


def _incomplete(unit: Reasoning | Text | Call) -> bool:
    metadata = unit.call.metadata if isinstance(unit, Call) else unit.message.metadata
    return metadata_hint(metadata, "incomplete") is True


def _cut_run(unit: Reasoning | Call, turns: list[Turn]) -> list[str]:
    """The run of a unit left out as cut, else of the unit before it in the turn being built."""
    key = run_key(unit)
    if key is None and turns and isinstance(turns[-1], AssistantTurn) and turns[-1].units:
        key = run_key(turns[-1].units[-1])
    return [key] if key is not None else []


def _settle_failed_run(
    units: list[Reasoning | Text | Call], *, had_unanswered: bool, superseded: bool, log: ReplayLog
) -> list[Reasoning | Text | Call]:
    """What stays of a failed run (its unanswered calls already out) inside a turn that stays."""
    if superseded and not any(isinstance(u, Call) for u in units):  # a retry answered the same input again
        for unit in units:
            if isinstance(unit, Text) and _incomplete(unit):
                _warn_cut_text(unit, log, "a retry answered again after it")
            else:
                log.warn(
                    "superseded_run",
                    f"{unit.entity_id} belongs to a run that failed and was retried: left out with it",
                    entity_id=unit.entity_id,
                )
        return []
    if superseded:  # the loop went on from one of its calls: only its cut text goes
        for unit in units:
            if isinstance(unit, Text) and _incomplete(unit):
                _warn_cut_text(unit, log, "a retry answered again after it")
        units = [u for u in units if not (isinstance(u, Text) and _incomplete(u))]
    while had_unanswered and units and isinstance(units[-1], Reasoning):
        unit = units.pop()
        log.warn(
            "unanswered_call_reasoning",
            f"reasoning {unit.entity_id} led only to an unanswered tool call: left out with it",
            entity_id=unit.entity_id,
        )
    return units


def _leave_out_retried_turn(turn: AssistantTurn, unanswered: list[Call], log: ReplayLog) -> None:
    """The history ends with this turn and its last run failed: the client retries the same
    messages, the retry produces the turn again, and the request ends at the input it answers."""
    for unit in turn.units:
        if any(unit is c for c in unanswered):
            continue
        if isinstance(unit, Text) and _incomplete(unit):
            _warn_cut_text(unit, log, "the history ends with it, so the request would prefill the answer")
        elif isinstance(unit, Reasoning):
            code = "unanswered_call_reasoning" if unanswered else "retried_turn"
            log.warn(
                code,
                f"reasoning {unit.entity_id} ends the history in a turn whose run failed: left out, the retry "
                "produces the turn again",
                entity_id=unit.entity_id,
            )
        else:
            log.counters["unanswered_turn_units" if unanswered else "retried_turn_units"] += 1


def _warn_cut_text(unit: Text, log: ReplayLog, why: str) -> None:
    log.warn(
        "interrupted_text",
        f"assistant message {unit.entity_id} was cut off when its run was interrupted ({why}): shown to the "
        "user, not replayed",
        entity_id=unit.entity_id,
    )


def restore_unseen(conversation: Conversation) -> None:
    """Put back the reasoning units the client never saw, where they streamed.

    A client of the audience-filtered stream holds summaries only: raw or redacted
    reasoning and opaque-only carriers were removed whole, and encrypted values never
    reach it (``workers/core/audience.py``). Their state is still the provider's to get
    back (P5). A unit is placed only where its place is certain — before the item that
    followed it (a record naming ``extra.following_item``, OpenAI), or by its position
    among units of the same response whose positions are known (from their records,
    or from ids reasonwire minted as ``<response>:<role>:<index>``). A unit of a turn
    the client trimmed away, or whose place is ambiguous, is left out with a warning.
    """
    pending = sorted(conversation.continuity.unseen.items(), key=lambda item: -item[1][0].native.position)
    for _ in range(len(pending) + 1):  # a follower may itself be an unseen unit placed in an earlier pass
        left = []
        for entity, records in pending:
            if _place(conversation, _unseen_unit(entity, records), records[0]):
                conversation.log.counters["unseen_units_restored"] += 1
            else:
                left.append((entity, records))
        if len(left) == len(pending):
            break
        pending = left
    for entity, records in pending:
        turn = _anchor_turn(conversation, records[0])
        if turn is not None or records[0].native.extra.get("following_item"):
            conversation.unplaced.append((turn, _unseen_unit(entity, records)))
            conversation.log.warn(
                "unseen_unit_not_placed",
                f"reasoning {entity[1]} was not in the client's history and its place in the turn is ambiguous: left out",
                entity_id=entity[1],
            )
        else:  # the client trimmed that turn away: nothing to rebuild
            conversation.log.counters["artefacts_not_in_history"] += len(records)


def _unseen_unit(entity: Entity, records: list[ArtefactRecord]) -> Reasoning:
    message = ReasoningMessage(id=entity[1], content="")
    return Reasoning(message=message, entity_id=entity[1], artefacts=records, excluded=[], client_value=False)


def _place(conversation: Conversation, unit: Reasoning, record: ArtefactRecord) -> bool:
    follower = record.native.extra.get("following_item")
    if isinstance(follower, Mapping):
        for candidate in conversation.turns:
            if isinstance(candidate, AssistantTurn):
                for index, other in enumerate(candidate.units):
                    if _follows(other, follower):
                        candidate.units.insert(index, unit)
                        return True
        return False
    turn = _anchor_turn(conversation, record)
    if turn is None:
        return False
    position = record.native.position
    positions = [_position(other, record) for other in turn.units]
    before = [i for i, p in enumerate(positions) if p is not None and p < position]
    after = [i for i, p in enumerate(positions) if p is not None and p > position]
    low = before[-1] + 1 if before else 0
    high = after[0] if after else len(turn.units)
    if low > high or any(positions[i] is None for i in range(low, high)):
        return False  # a unit of unknown position sits where this one could go, or the order disagrees
    turn.units.insert(low, unit)
    return True


def _anchor_turn(conversation: Conversation, record: ArtefactRecord) -> AssistantTurn | None:
    """The assistant turn holding other units of the record's response, if the client kept any."""
    for turn in conversation.turns:
        if isinstance(turn, AssistantTurn) and any(_position(u, record) is not None for u in turn.units):
            return turn
    return None


def _position(unit: Reasoning | Text | Call, record: ArtefactRecord) -> int | None:
    """The unit's position in ``record``'s response, when known."""
    response = record.native.response_id
    for other in unit.artefacts + [e.record for e in unit.excluded if e.record is not None]:
        if other.native.response_id == response and other.run_id == record.run_id:
            return other.native.position
    if record.issuer.grammar not in _INDEXED_IDS:
        return None
    if isinstance(unit, Call):  # a provider id: the translator's start-event hint places it
        index, owner = metadata_hint(unit.call.metadata, "blockIndex"), metadata_hint(unit.call.metadata, "responseId")
        if type(index) is int and owner is not None and owner in (response, record.run_id):
            return index
        return None
    for prefix in dict.fromkeys(p for p in (response, record.run_id) if p):
        head, _, index = unit.entity_id.rpartition(":")
        if unit.entity_id.startswith(f"{prefix}:") and head.count(":") >= 1 and index.isdigit():
            return int(index)
    return None


_INDEXED_IDS = frozenset(
    {Grammar.ANTHROPIC_MESSAGES, Grammar.BEDROCK_CONVERSE, Grammar.GEMINI_INTERACTIONS, Grammar.OPENAI_CHAT_COMPLETIONS}
)
"""Grammars whose translators mint text and reasoning ids as ``<response>:<role>:<block or step index>``
(``Translator.mint(role, index)``); OpenAI mints by item id, Gemini generateContent by unit ordinal.
Chat Completions: the reasoning is unit 0 of its message, the text after it, each call hinted
(``blockIndex``, ``responseId``), so a reasoning message the client never held goes first in its turn."""


def _follows(unit: Reasoning | Text | Call, follower: Mapping[str, Any]) -> bool:
    """Whether ``unit`` is the provider item a reasoning record says followed it."""
    kind, item_id = follower.get("type"), follower.get("id")
    if isinstance(unit, Call):
        return kind == "function_call" and unit.call.id == follower.get("call_id")
    if isinstance(unit, Text):
        hinted = metadata_hint(unit.message.metadata, "itemId")
        return kind == "message" and item_id is not None and (hinted == item_id or unit.entity_id.endswith(f":{item_id}"))
    return kind == "reasoning" and any(r.native.item_id == item_id for r in unit.artefacts)


def _arguments(call: ToolCall) -> dict[str, Any] | None:
    try:
        value = json.loads(call.function.arguments or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def content_texts(content: str | list[Any], *, what: str) -> list[str]:
    """The text of a message's content; a media part is refused rather than silently dropped."""
    if isinstance(content, str):
        return [content]
    texts = []
    for part in content:
        if not isinstance(part, TextPart):
            kind = getattr(part, "type", type(part).__name__)
            raise InvalidHistory(f"{what} carries a {kind!r} part: replay maps text content only")
        texts.append(part.text)
    return texts


# -- the builders' contract and the run ----------------------------------------------------------


class ReplayBuilder:
    """One grammar's provider-native shapes.

    :meth:`build` walks the conversation's turns once, asking the grammar for the
    entries each turn becomes (``user``, ``tool_results``, ``assistant``,
    ``instructions``), then puts them in the request fragment: the entries under
    ``history_key`` (``history`` may merge them), the lifted-out instructions
    under ``system_key`` in the grammar's shape (``system``). Subclasses set
    ``grammar`` and the keys and implement the hooks.
    """

    grammar: ClassVar[Grammar]
    history_key: ClassVar[str]
    """Where the history goes in the grammar's request body."""
    system_key: ClassVar[str | None] = None
    """Where lifted-out instructions go; None when they stay in the history (``instructions``)."""

    def build(self, conversation: Conversation) -> dict[str, Any]:
        entries: list[dict[str, Any]] = []
        for turn in conversation.turns:
            if isinstance(turn, UserTurn):
                entries += self.user(turn)
            elif isinstance(turn, ToolResults):
                entries += self.tool_results(turn, conversation)
            elif isinstance(turn, AssistantTurn):
                entries += self.assistant(turn, conversation)
            else:
                entries += self.instructions(turn)
        return self.fragment(entries, conversation)

    def user(self, turn: UserTurn) -> list[dict[str, Any]]:
        raise NotImplementedError

    def tool_results(self, turn: ToolResults, conversation: Conversation) -> list[dict[str, Any]]:
        raise NotImplementedError

    def assistant(self, turn: AssistantTurn, conversation: Conversation) -> list[dict[str, Any]]:
        raise NotImplementedError

    def instructions(self, turn: Instructions) -> list[dict[str, Any]]:
        """System / developer messages in the history; most grammars lift them out (see ``fragment``)."""
        return []

    def fragment(self, entries: list[dict[str, Any]], conversation: Conversation) -> dict[str, Any]:
        fragment: dict[str, Any] = {self.history_key: self.history(entries)}
        if self.system_key is not None and conversation.instructions:
            fragment[self.system_key] = self.system(conversation.instructions)
        return fragment

    def history(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The entries as the request carries them (grammars that merge adjacent turns override)."""
        return entries

    def system(self, instructions: list[str]) -> Any:
        """The lifted-out instructions in the grammar's shape (default: one text, paragraphs apart)."""
        return "\n\n".join(instructions)

    def needs_artefact(self, unit: Reasoning | Text | Call, conversation: Conversation) -> bool:
        """Whether the provider rejects an open tool loop whose current turn lacks this unit's state."""
        return False

    def resolve_target(self, target: ReplayTarget) -> ReplayTarget:
        """The target with its provider named where the grammar can tell it from the model
        (``grok-…`` is xAI's): issuers are compared with it (R8)."""
        return target

    def model_bound(self, record: ArtefactRecord) -> bool:
        """Whether the record goes back only to its issuer's model family (opaque state is
        model-bound: REFERENCE §1.7, §2.5, §3.3), or to any model of its provider."""
        return True

    call_id_limit: ClassVar[int | None] = None
    """Longest tool-call id the grammar accepts; with ``call_id_pattern``, None = unconstrained."""
    call_id_pattern: ClassVar[re.Pattern[str] | None] = None
    """What a tool-call id must match in this grammar (Anthropic ``^[a-zA-Z0-9_-]+$``)."""

    def call_id(self, call_id: str, conversation: Conversation) -> str:
        """The id a call (and its result, alike) carries in this grammar.

        An id another grammar issued or reasonwire minted (Gemini 2.5 calls have none, so the
        translator mints ``<responseId>:tool:<n>``) may break this grammar's rule: it is rewritten
        the same way every time — invalid characters to ``_``, and when that changed it or it is too
        long, a hash of the original id appended — so the call and its result still pair and two ids
        never collide. Valid ids go back unchanged."""
        pattern, limit = self.call_id_pattern, self.call_id_limit
        if pattern is None or (pattern.fullmatch(call_id) and (limit is None or len(call_id) <= limit)):
            return call_id
        rewritten = rewrite_call_id(call_id, limit or 64)
        if call_id not in conversation.rewritten_ids:
            conversation.rewritten_ids[call_id] = rewritten
            conversation.log.counters["call_ids_rewritten"] += 1
            conversation.log.warn(
                "call_id_rewritten",
                f"tool call {call_id} has an id {self.grammar.value} does not accept: sent as {rewritten}, "
                "its result alike",
                entity_id=call_id,
            )
        return rewritten


_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def rewrite_call_id(call_id: str, limit: int) -> str:
    """A tool-call id of ``[A-Za-z0-9_-]`` within ``limit`` characters, the same for the same input:
    readable where it can be (the id with invalid characters as ``_``), unique by a hash of the original."""
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    readable = _ID_UNSAFE.sub("_", call_id)[: max(0, limit - len(digest) - 4)]
    return f"rw_{readable}_{digest}" if readable else f"rw_{digest}"


def replay_conversation(
    builder: ReplayBuilder,
    history: Any,
    artefacts: Iterable[ArtefactRecord],
    target: ReplayTarget,
    *,
    tenant: str | None = None,
    honour_client_omissions: bool = False,
) -> ReplayResult:
    """The whole replay for one grammar (see the module docstring); raises :class:`ReplayError`."""
    log = ReplayLog()
    messages, _ = read_history(history)
    target = builder.resolve_target(target)
    continuity = Continuity(
        messages,
        artefacts,
        target,
        log,
        tenant=tenant,
        honour_client_omissions=honour_client_omissions,
        model_bound=builder.model_bound,
    )
    conversation = build_conversation(messages, continuity, log)
    current = conversation.current_turns()
    for turn, unseen in conversation.unplaced:
        if any(turn is c for c in current) and builder.needs_artefact(unseen, conversation):
            raise ProviderWouldReject(
                f"{target.grammar.value}: {_describe(unseen)} of the open tool-use turn is not in the client's "
                "history and its place in the turn is ambiguous; the provider rejects a tool-use continuation "
                "without it. Send the history with its reasoning messages, or start a new user turn.",
                entity_id=unseen.entity_id,
            )
    for turn in current:
        for unit in turn.units:
            if not unit.artefacts and builder.needs_artefact(unit, conversation):
                reasons = ", ".join(dict.fromkeys(e.reason for e in unit.excluded)) or "no stored artefact"
                raise ProviderWouldReject(
                    f"{target.grammar.value}: {_describe(unit)} of the open tool-use turn has no replayable "
                    f"opaque state ({reasons}); the provider rejects a tool-use continuation without it. "
                    "Continue with the issuing model and scope, or start a new user turn.",
                    entity_id=unit.entity_id,
                )
    fragment = builder.build(conversation)
    sent = [u for u in conversation.units() if u.artefacts and all(u is not d for d in conversation.dropped)]
    log.counters["artefacts_replayed"] += sum(len(u.artefacts) for u in sent)
    return ReplayResult(fragment, log.warnings, log.counters, [u.entity_id for u in sent])


def _describe(unit: Reasoning | Text | Call) -> str:
    if isinstance(unit, Reasoning):
        return f"reasoning message {unit.entity_id}"
    if isinstance(unit, Call):
        return f"tool call {unit.entity_id}"
    return f"assistant message {unit.entity_id}"


def metadata_hint(metadata: Mapping[str, Any] | None, key: str) -> Any:
    """A continuity hint the client kept from the event metadata reasonwire emitted, if any.

    reasonwire puts non-opaque provider identity (OpenAI item ids, message phase,
    Gemini minted-id flags) under ``metadata.reasonwire`` of the start events; a
    client that copies start-event metadata onto its messages (as
    :class:`reasonwire.workers.replay.consumer.AgUiConsumer` does) returns it. Hints never decide
    what opaque state goes where — only ids and labels that make items exact.
    """
    if not isinstance(metadata, Mapping):
        return None
    ours = metadata.get("reasonwire")
    return ours.get(key) if isinstance(ours, Mapping) else None


def drop_reasoning_only(turn: AssistantTurn, conversation: Conversation) -> bool:
    """A turn cut off after its reasoning (interrupted before any answer or call) has nothing the
    reasoning could precede; earlier turns' reasoning is not read by the model anyway. True when
    the turn was such a turn and its state was left out (for grammars whose blocks need a follower)."""
    if not all(isinstance(unit, Reasoning) for unit in turn.units):
        return False
    for unit in turn.units:
        if unit.artefacts:
            conversation.drop(unit, "reasoning_only_turn", f"{unit.entity_id} ends a turn with no answer or call: left out")
    return True


def merge_adjacent(
    messages: list[dict[str, Any]], key: str, as_list: Any, *, role: str = "role"
) -> list[dict[str, Any]]:
    """Join consecutive messages of one role (tool results then a user message): grammars that
    alternate roles reject two in a row. ``as_list`` turns a message's ``key`` into a list."""
    merged: list[dict[str, Any]] = []
    for message in messages:
        if merged and merged[-1][role] == message[role]:
            previous = merged[-1]
            previous[key] = as_list(previous[key]) + as_list(message[key])
        else:
            merged.append(dict(message))
    return merged
