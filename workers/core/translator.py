"""The translator base: one provider run in, AG-UI events and artefact records out.

Theory of operation
-------------------
A translator is a plain object fed one raw provider event at a time
(:meth:`Translator.feed`) and told when input ends (:meth:`Translator.finish`) or
the connection dropped (:meth:`Translator.abort`). Each call returns a
:class:`Translation`: the AG-UI events to publish, the artefact records to
store, warnings to log and count, and — if the input was malformed — the
:class:`Rejection` that tells the caller to dead-letter it. No I/O happens here.

Everything every grammar does the same way lives in this class, once:

* parsing (bytes → JSON object); a line that is not a JSON object is a malformed
  event (R7): ``RUN_ERROR``, rejection, nothing else lost. Escaped UTF-16 surrogate
  halves in a text field (a character cut between two deltas) are valid JSON and
  accepted; the discipline joins them (``reasonwire.workers.core.surrogates``);
* dispatch through the subclass's ``HANDLERS`` table keyed by the provider's
  event type; a type not in the table is an unknown event (P3): warned,
  counted, skipped, open units untouched;
* a :class:`ProviderGrammarError` or :class:`DisciplineViolation` from a
  handler ends the run with ``RUN_ERROR`` naming the line (R7);
* input that ends without the provider's terminal event is an interrupted run:
  open units closed, held artefacts kept as incomplete records, ``RUN_ERROR``
  with code ``interrupted``;
* events after the run ended are warned about and ignored;
* an exact repeat — an event the grammar identifies as one that happens once
  (:meth:`Translator.delivery_key`: an OpenAI ``sequence_number``, an Anthropic block
  stop) arriving again with the same bytes, adjacent or not (a producer retrying a
  batch repeats several events) — is a duplicate delivery: dropped with a
  ``duplicate_event`` warning, never translated twice;
* usage normalization into AG-UI ``TokenUsage`` on the terminal event;
* opaque values through :meth:`Translator.hold_artefact`: an *empty* one means the
  unit is unsigned, in every grammar — warned, never announced, recorded incomplete
  by the ledger, never replayed;
* a terminal event that *cut* the output (a token limit) finishes the run with
  ``truncated=True``: what it closes carries the ``incomplete`` marker.
* explicit limits on hostile input (``reasonwire.workers.core.limits``): an event nested
  deeper than ``MAX_NESTING`` is malformed (R7); a usage total the provider's
  counts add up to beyond AG-UI's range (0 … 2^53−1) is left out of
  ``TokenUsage`` with a ``usage_out_of_range`` warning (each count itself is
  checked by ``reasonwire.workers.core.errors.token_count``);
* a run whose provider ended a tool call with cut-off arguments ends with
  ``RUN_ERROR`` ``incomplete_tool_call`` instead of ``RUN_FINISHED`` (AG-UI can
  neither end such a call nor finish with it open; ``reasonwire.workers.core.discipline``);
* a safety net: an exception no rule anticipated (a bug) never escapes
  ``feed`` / ``finish`` / ``abort`` — the run ends with ``RUN_ERROR``
  ``internal_error`` and the event is rejected, so the worker dead-letters it
  and moves on. Every such hit is a bug to fix; ``make fuzz`` reports them.

Translators are deterministic: the same input gives the same events and ids,
which is what lets a worker that takes over a run re-feed it and skip what was
already published.
"""

from __future__ import annotations

import hashlib
import traceback
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any, ClassVar, Protocol

import orjson
from mypy_extensions import mypyc_attr

from reasonwire.contracts.artefacts import ArtefactRecord, Issuer
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.usage import NO_TOKENS, UsageRecord
from reasonwire.workers.core.arguments import type_name
from reasonwire.workers.core.artefacts import ArtefactLedger, HeldArtefact
from reasonwire.workers.core.discipline import DisciplineViolation, RunPhase, StreamDiscipline
from reasonwire.workers.core.errors import ProviderGrammarError
from reasonwire.workers.core.events import WireEvent, token_usage
from reasonwire.workers.core.surrogates import loads_with_lone_surrogates
from reasonwire.workers.core.limits import MAX_NESTING, MAX_TOKEN_COUNT, too_deep


class RunEnd(StrEnum):
    """How a run ended (expected.json ``end.kind``)."""

    FINISHED = "finished"
    ERROR = "error"
    INTERRUPTED = "interrupted"


class ErrorCode(StrEnum):
    """``RUN_ERROR.code`` values reasonwire emits."""

    INTERRUPTED = "interrupted"
    """Input ended or the connection dropped before the provider's terminal event."""
    PROVIDER_ERROR = "provider_error"
    """The provider reported an error in the stream."""
    MALFORMED_EVENT = "malformed_event"
    """An event was not JSON, or a known event missed a required field (R7)."""
    INACTIVITY_TIMEOUT = "inactivity_timeout"
    """The ingress went silent longer than the configured timeout."""
    INCOMPLETE_TOOL_CALL = "incomplete_tool_call"
    """The provider ended the run (or a call) while a tool call's arguments were cut off,
    e.g. at ``max_tokens``: AG-UI cannot end that call, so the run cannot finish."""
    INTERNAL_ERROR = "internal_error"
    """A bug in reasonwire, caught by the translator's safety net; the event is dead-lettered."""


@dataclass(frozen=True)
class TranslatorWarning:
    """Something skipped or suspicious; safe to log (no content, P8)."""

    code: str
    message: str
    line: int


@dataclass(frozen=True)
class Rejection:
    """The input event that ended the run as malformed: dead-letter it (R7)."""

    line: int
    reason: str


@dataclass(slots=True, init=False)
class Translation:
    """What one call into a translator produced (events in AG-UI wire shape, ``reasonwire.workers.core.events``)."""

    events: list[WireEvent]
    artefacts: list[ArtefactRecord]
    warnings: list[TranslatorWarning]
    rejection: Rejection | None

    def __init__(
        self,
        events: list[WireEvent] | None = None,
        artefacts: list[ArtefactRecord] | None = None,
        warnings: list[TranslatorWarning] | None = None,
        rejection: Rejection | None = None,
    ) -> None:
        """Written out: one per event fed (see ``normalizer.Step``)."""
        self.events = [] if events is None else events
        self.artefacts = [] if artefacts is None else artefacts
        self.warnings = [] if warnings is None else warnings
        self.rejection = rejection


Handler = Callable[[Any, dict[str, Any]], None]


class RunTranslator(Protocol):
    """What the normalizer asks of one run's translator (:class:`Translator` is the implementation).

    The normalizer holds translators by this interface, not by the base class: compiled by mypyc,
    a value typed with a class is checked against it at run time, and the delivery simulation
    feeds the normalizer a stub that needs only these."""

    end: RunEnd | None
    line: int

    @property
    def ended(self) -> bool: ...

    def feed(self, raw: bytes, *, sse_event: str | None = None, at_ms: float | None = None) -> Translation: ...

    def finish(self) -> Translation: ...

    def abort(self, reason: str, *, code: ErrorCode = ErrorCode.INTERRUPTED) -> Translation: ...

    def usage_record(self, *, tenant: str | None = None) -> UsageRecord: ...


class TranslatorFactory(Protocol):
    """Makes a fresh translator for one run of a grammar (``reasonwire.workers.translators.translator_for``).

    The core is handed one rather than importing the registry: the translators build on the core,
    so the core naming them would be the one arrow that runs upward."""

    def __call__(
        self,
        grammar: Grammar,
        /,
        *,
        run_id: str,
        thread_id: str,
        model: str | None,
        issuer_scope: str | None,
        issuer_provider: str | None = None,
    ) -> RunTranslator: ...


# the grammars' translators subclass it and stay interpreted when the core is compiled
@mypyc_attr(allow_interpreted_subclasses=True)
class Translator:
    """Base of every grammar's translator; subclasses supply ``HANDLERS`` and hooks."""

    grammar: ClassVar[Grammar]
    HANDLERS: ClassVar[Mapping[str, Handler]]
    """Provider event type → handler. Anything not here is an unknown event (P3). A subclass sets
    it after its class body (``Cls.HANDLERS = {…: Cls._on_x}``): compiled by mypyc
    (``tools/build_native.py``), a class body's table of its own functions does not resolve."""

    def __init__(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        model: str | None = None,
        issuer_scope: str | None = None,
        fallback_run_id: str | None = None,
        issuer_provider: str | None = None,
    ) -> None:
        self._run_id = run_id
        self._fallback_run_id = fallback_run_id
        self._thread_id = thread_id
        self.model = model
        self.issuer_scope = issuer_scope
        self.issuer_provider = issuer_provider
        """The provider the producer stated (``rw-issuer-provider``), for grammars many providers speak."""
        self.response_id: str | None = None
        self.event_name = ""
        """The event type the current event was dispatched on (its own field, or its SSE name)."""
        self.line = 0
        self.counters: Counter[str] = Counter()
        self.tokens = NO_TOKENS
        self.end: RunEnd | None = None
        self.stop_reason: str | None = None
        self._run: StreamDiscipline | None = None
        self._ledger: ArtefactLedger | None = None
        self._warnings: list[TranslatorWarning] = []
        self._deferred_end: dict[str, Any] | None = None
        self._first_at_ms: float | None = None
        self._delivered: dict[Hashable, int] = {}
        """Delivery key → hash of the bytes that carried it, for the last ``DELIVERY_WINDOW`` keys."""
        self.time_to_first_reasoning_ms: float | None = None
        self.time_to_first_text_ms: float | None = None
        self._init_grammar_state()

    def _init_grammar_state(self) -> None:
        """Hook: a grammar's own per-run state, set up at the end of ``__init__``. A subclass
        overrides this rather than ``__init__(**kwargs)``, which mypyc compiles wrongly (it passed
        the keywords as one positional argument)."""

    # -- public API ---------------------------------------------------------------

    @property
    def run(self) -> StreamDiscipline:
        if self._run is None:
            raise RuntimeError("the run has not started: feed an event first")
        return self._run

    @property
    def artefacts(self) -> ArtefactLedger:
        if self._ledger is None:
            raise RuntimeError("the run has not started: feed an event first")
        return self._ledger

    @property
    def ended(self) -> bool:
        return self._run is not None and self._run.phase is RunPhase.ENDED

    def feed(self, raw: Any, *, sse_event: str | None = None, at_ms: float | None = None) -> Translation:
        """Translate one provider event (the SSE ``data:`` payload, unchanged).

        ``raw`` is the event as received: ``bytes`` (or ``str``, ``bytearray``). Anything else — a
        dict the caller parsed, None — raises ``TypeError`` and leaves the run as it was: the
        translator's input is the provider's own bytes, which it compares for duplicate deliveries
        and dead-letters unchanged, so it never takes a parsed object to re-encode. The check costs
        nothing on the way of bytes or str: it runs only once orjson has refused the input (``raw``
        is typed ``Any`` so that the compiled build, which checks annotated types on entry, gives
        the same error, not its own).

        The hot path of the whole system (one call per provider event): it keeps to
        local lookups and one dispatch; everything unusual branches off it.
        """
        self.line += 1
        try:
            run = self._run
            if run is not None and run.phase is RunPhase.ENDED:
                self._warn("event_after_end", "event after the end of the run ignored")
                return self._collect()
            halves = False
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                if not isinstance(raw, _PROVIDER_BYTES):  # checked here, off the hot path: orjson refused it
                    raise _NotProviderBytes(type_name(raw)) from None
                obj = loads_with_lone_surrogates(raw, exc)
                halves = obj is not None
            if run is None:
                self._start(obj if type(obj) is dict else None, raw)
            if halves:  # a character cut between two events: the discipline joins its halves
                self.run.join_surrogates = True
            if at_ms is not None and self._first_at_ms is None:
                if type(at_ms) not in (int, float):  # once per run
                    raise _NotProviderBytes(type_name(at_ms), argument="at_ms")
                self._first_at_ms = at_ms
            if type(obj) is not dict:
                return self._reject("event is not a JSON object")
            if too_deep(raw, obj):
                return self._reject(f"event nested deeper than {MAX_NESTING} levels")
            event_type = self.event_type(obj, sse_event)
            handler = self.HANDLERS.get(event_type) if event_type is not None else None
            if handler is None or event_type is None:
                self.counters["unknown_events"] += 1
                self._warn("unknown_event", f"unknown {self.grammar.value} event type {event_type!r} skipped")
                return self._collect()
            key = self.delivery_key(obj)
            if key is not None and self._redelivered(key, raw):
                self.counters["duplicate_events"] += 1
                self._warn("duplicate_event", f"{event_type!r} repeated byte for byte: a duplicate delivery, dropped")
                return self._collect()
            self.event_name = event_type
            try:
                handler(self, obj)
            except (ProviderGrammarError, DisciplineViolation) as exc:
                reason = exc.reason if isinstance(exc, ProviderGrammarError) else f"stream discipline: {exc}"
                return self._reject(f"{event_type}: {reason}" if not reason.startswith(event_type) else reason)
            if at_ms is not None and (self.time_to_first_reasoning_ms is None or self.time_to_first_text_ms is None):
                self._note_timing(at_ms)
            return self._collect()
        except _NotProviderBytes as exc:  # the caller's mistake, not a bug: the run is left as it was
            self.line -= 1
            raise TypeError(exc.message()) from None
        except Exception as exc:  # noqa: BLE001 - the safety net: a bug must not poison the partition
            return self._internal_error(exc)

    def finish(self) -> Translation:
        """End of input. Without the provider's terminal event the run was interrupted."""
        try:
            return self._end_of_input("stream ended before the provider's terminal event", ErrorCode.INTERRUPTED)
        except Exception as exc:  # noqa: BLE001 - the safety net, as in feed()
            return self._internal_error(exc)

    def abort(
        self, reason: object = "the connection to the provider dropped", *, code: ErrorCode | str = ErrorCode.INTERRUPTED
    ) -> Translation:
        """The ingress lost the stream (or went silent): close the run as interrupted. ``code`` is an
        :class:`ErrorCode` or its value; anything else raises before the run is touched."""
        if not isinstance(reason, str):
            raise TypeError(f"abort() reason must be a string saying why the stream ended, not {type_name(reason)}")
        if not isinstance(code, ErrorCode):
            choices = ", ".join(c.value for c in ErrorCode)
            if not isinstance(code, str) or code not in {c.value for c in ErrorCode}:
                raise ValueError(f"abort() code must be an ErrorCode ({choices}), not {code!r}"[:300])
            code = ErrorCode(code)
        try:
            return self._end_of_input(reason, code)
        except Exception as exc:  # noqa: BLE001 - the safety net, as in feed()
            return self._internal_error(exc)

    def _end_of_input(self, reason: str, code: ErrorCode) -> Translation:
        """No more input: a deferred finish completes, anything else still open is interrupted."""
        if self._run is None:
            self._start(None, b"")
        if not self.ended:
            if self._deferred_end is not None:
                self._finish_now(**self._deferred_end)
            else:
                self._interrupt(reason, code=code)
        return self._collect()

    def usage_record(self, *, tenant: str | None = None) -> UsageRecord:
        """The run's usage record for ``reasoning.usage.v1`` (P6); call after the end."""
        return UsageRecord(
            run_id=self.run.run_id,
            thread_id=self.run.thread_id,
            tenant=tenant,
            grammar=self.grammar,
            model=self.model,
            tokens=self.tokens,
            end=(self.end or RunEnd.INTERRUPTED).value,
            stop_reason=self.stop_reason,
            reasoning_blocks=self.run.reasoning_messages,
            tool_calls=self.run.tool_calls,
            time_to_first_reasoning_ms=self.time_to_first_reasoning_ms,
            time_to_first_text_ms=self.time_to_first_text_ms,
        )

    # -- hooks for subclasses --------------------------------------------------------

    def event_type(self, obj: dict[str, Any], sse_event: str | None) -> str | None:
        """The provider's discriminator for this event (default: its ``type`` field)."""
        value = obj.get("type", sse_event)
        return value if isinstance(value, str) else None

    def stream_identity(self, obj: dict[str, Any]) -> tuple[str | None, str | None]:
        """(response id, model) if this first event carries them; they seed default ids."""
        return None, None

    def hold_artefact(self, key: Hashable, artefact: HeldArtefact, *, where: str) -> bool:
        """Hold an opaque value until its unit closes (the ledger emits it then).

        An empty value means the unit is unsigned, in every grammar: warned here
        (``empty_signature``), never announced, recorded incomplete by the ledger, never
        replayed — providers answer a replayed ``""`` with "Invalid signature" (R3, P5)."""
        if self.artefacts.hold(key, artefact):
            return True
        self.empty_signature(artefact.kind, where, "unsigned, not announced, never replayed")
        return False

    def empty_signature(self, field: str, where: str, outcome: str) -> None:
        """Count and warn about an empty opaque value (``empty_signature``): the field's name and
        where it sat, never a value (P8). Also for empties a grammar drops before holding them."""
        self.counters["empty_signatures"] += 1
        self._warn("empty_signature", f"empty {field} on {where}: {outcome}")

    def usage_provider(self) -> str:
        """Hook: the ``TokenUsage.provider`` label (default: the grammar's provider; a grammar many
        providers speak names the run's own)."""
        return self.grammar.provider_name

    def before_abnormal_end(self) -> None:
        """Hook: the run is about to end with units open (error, interruption, malformed input),
        before held values become incomplete records; a grammar puts its units in order here."""

    DELIVERY_WINDOW: ClassVar[int] = 1024
    """How many recent delivery keys are remembered (a retried batch repeats recent events)."""

    def delivery_key(self, obj: dict[str, Any]) -> Hashable | None:
        """What makes this event happen once in its run, or None when equal events may repeat.

        Default None: two equal deltas are legitimate text ("\\n" twice). A grammar whose events
        are unique by construction (a sequence number) or by kind (a block stops once) names the
        key, and the same key again *with the same bytes* is dropped as a duplicate delivery
        instead of failing the run; with other bytes it is handled as usual."""
        return None

    def _redelivered(self, key: Hashable, raw: bytes | str | bytearray) -> bool:
        try:
            digest = hash(raw)
        except TypeError:  # a bytearray is unhashable; off the hot path
            if not isinstance(raw, bytearray):
                raise
            digest = hash(bytes(raw))
        seen = self._delivered.get(key)
        if seen is not None:
            return seen == digest
        self._delivered[key] = digest
        if len(self._delivered) > self.DELIVERY_WINDOW:
            del self._delivered[next(iter(self._delivered))]
        return False

    # -- helpers for subclasses ------------------------------------------------------

    def mint(self, role: str, unit: object) -> str:
        """A deterministic AG-UI id for a provider unit: ``<response>:<role>:<unit>``."""
        return f"{self.response_id or self.run.run_id}:{role}:{unit}"

    def block_hint(self, index: int) -> dict[str, Any]:
        """Start-event metadata placing a unit whose id is the provider's (a tool call) at its block
        index in its response — what minted ids say for the others. Replay needs it to put back a
        unit an audience filter hid next to it."""
        return {"blockIndex": index, "responseId": self.response_id or self.run.run_id}

    def finish_run(
        self, *, stop_reason: str | None, pending_tool_call_ids: list[str] | None = None, truncated: bool = False
    ) -> None:
        """The provider's terminal event arrived: close the run as finished. ``truncated``: the
        provider cut the output (a token limit), so units still open close marked incomplete."""
        self._finish_now(stop_reason=stop_reason, pending_tool_call_ids=pending_tool_call_ids, truncated=truncated)

    def defer_finish(
        self, *, stop_reason: str | None, pending_tool_call_ids: list[str] | None = None, truncated: bool = False
    ) -> None:
        """The terminal event arrived but a trailer (usage) may follow: finish on it or at EOF."""
        self.stop_reason = stop_reason
        self._deferred_end = {"stop_reason": stop_reason, "pending_tool_call_ids": pending_tool_call_ids, "truncated": truncated}

    def complete_deferred_finish(self) -> None:
        if self._deferred_end is not None:
            self._finish_now(**self._deferred_end)

    def provider_error(self, message: str, *, provider_code: str | None = None) -> None:
        """The provider reported an error in the stream: ``RUN_ERROR`` after closing (R1)."""
        self.end = RunEnd.ERROR
        self.before_abnormal_end()
        self.artefacts.abandon_all()
        meta = {"grammar": self.grammar.value, "providerCode": provider_code} if provider_code else None
        self.run.fail_run(message=message, code=ErrorCode.PROVIDER_ERROR, usage=self._token_usage(), metadata=meta)

    # -- internals -----------------------------------------------------------------

    def _start(self, obj: dict[str, Any] | None, raw: bytes | str | bytearray) -> None:
        response_id, model = self.stream_identity(obj) if obj is not None else (None, None)
        self.response_id = response_id
        self.model = model or self.model  # what the stream says produced it wins over the request
        run_id = self._run_id or response_id or self._fallback_run_id or _fallback_run_id(raw)
        self._run = StreamDiscipline(run_id=run_id, thread_id=self._thread_id or run_id)
        self._ledger = ArtefactLedger(self._run, _issuer(self.grammar, self.model, self.issuer_scope, self.issuer_provider))
        self._run.start_run(metadata={"grammar": self.grammar.value, "model": self.model})

    def _finish_now(
        self, *, stop_reason: str | None, pending_tool_call_ids: list[str] | None, truncated: bool = False
    ) -> None:
        self.end = RunEnd.FINISHED
        self.stop_reason = stop_reason
        self._deferred_end = None
        self.artefacts.abandon_all()
        meta = {"stopReason": stop_reason} if stop_reason else None
        cut_off = self.run.cut_off_tool_calls()
        if cut_off:  # e.g. max_tokens mid-arguments: the calls stay unterminated, listed (discipline)
            self.end = RunEnd.ERROR
            self.counters["incomplete_tool_calls"] += len(cut_off)
            message = f"the run ended with {len(cut_off)} tool call(s) whose arguments are not complete JSON"
            self.run.fail_run(message=message, code=ErrorCode.INCOMPLETE_TOOL_CALL, usage=self._token_usage(), metadata=meta)
            return
        self.run.finish_run(
            usage=self._token_usage(), metadata=meta, pending_tool_call_ids=pending_tool_call_ids, truncated=truncated
        )

    def _interrupt(self, reason: str, *, code: ErrorCode = ErrorCode.INTERRUPTED) -> None:
        self.end = RunEnd.INTERRUPTED
        self.before_abnormal_end()
        self.artefacts.abandon_all()
        self.run.fail_run(message=reason, code=code, usage=self._token_usage())

    def _reject(self, reason: str) -> Translation:
        """R7: a malformed known event (or non-JSON input) is fatal for the run."""
        self.end = RunEnd.ERROR
        self.counters["malformed_events"] += 1
        self.before_abnormal_end()
        self.artefacts.abandon_all()
        message = f"malformed {self.grammar.value} event at line {self.line}: {reason}"
        self.run.fail_run(message=message, code=ErrorCode.MALFORMED_EVENT, usage=self._token_usage())
        out = self._collect()
        out.rejection = Rejection(line=self.line, reason=message)
        return out

    def _token_usage(self) -> dict[str, Any] | None:
        t = self.tokens
        if t.input_tokens is None and t.output_tokens is None:
            return None
        counts = {
            "input_tokens": t.input_tokens,
            "output_tokens": t.output_tokens,
            "total_tokens": t.total_tokens,
            "reasoning_tokens": t.reasoning_tokens,
            "cached_input_tokens": t.cached_input_tokens,
            "cache_write_input_tokens": t.cache_write_input_tokens,
        }
        # Each provider count is within range (token_count); a sum of them may not be.
        over = [name for name, value in counts.items() if value is not None and not 0 <= value <= MAX_TOKEN_COUNT]
        if over:
            self.counters["usage_out_of_range"] += 1
            self._warn("usage_out_of_range", f"usage {', '.join(over)} beyond AG-UI's range (0 … 2^53-1) left out")
            for name in over:
                counts[name] = None
        return token_usage(provider=self.usage_provider(), model=self.model, **counts)

    def _internal_error(self, exc: Exception) -> Translation:
        """The safety net: end the run with ``RUN_ERROR`` ``internal_error`` and reject the event.

        Names the exception's type and where it was raised — never its message, which may
        quote provider content (P8). Closes what can be closed; if even that fails, the bare
        terminal event is emitted so the stream still ends."""
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else "?"
        self.counters["internal_errors"] += 1
        self._warn("internal_error", f"{type(exc).__name__} at {where}")
        message = f"internal error translating {self.grammar.value} event at line {self.line} ({type(exc).__name__})"
        try:
            if self._run is None:
                self._start(None, b"")
            if not self.ended:
                self.end = RunEnd.ERROR
                self._deferred_end = None
                self.artefacts.abandon_all()
                self.run.fail_run(message=message, code=ErrorCode.INTERNAL_ERROR)
        except Exception:  # noqa: BLE001 - the state is broken: end the stream with the bare terminal
            if self._run is not None and self._run.phase is not RunPhase.ENDED:
                self._run.abandon_with_error(message=message, code=ErrorCode.INTERNAL_ERROR)
        out = self._collect()
        out.rejection = Rejection(line=self.line, reason=message)
        return out

    def _note_timing(self, at_ms: float) -> None:
        if self._first_at_ms is None or self._run is None:
            return
        if self.time_to_first_reasoning_ms is None and self._run.reasoning_messages:
            self.time_to_first_reasoning_ms = at_ms - self._first_at_ms
        if self.time_to_first_text_ms is None and self._run.text_seen:
            self.time_to_first_text_ms = at_ms - self._first_at_ms

    def _warn(self, code: str, message: str) -> None:
        self._warnings.append(TranslatorWarning(code=code, message=message, line=self.line))

    def _collect(self) -> Translation:
        """Hand over what the last call produced (once per provider event: kept lean)."""
        warnings = self._warnings
        if warnings:
            self._warnings = []
        ledger = self._ledger
        return Translation(
            self._run.drain(),  # type: ignore[union-attr]
            ledger.drain() if ledger.pending else [],  # type: ignore[union-attr]
            warnings if warnings else [],
        )


@lru_cache(maxsize=1024)
def _issuer(grammar: Grammar, model: str | None, scope: str | None, provider: str | None = None) -> Issuer:
    """Issuers are immutable and few (grammar × model × scope × provider): built once each."""
    return Issuer(grammar=grammar, model=model, scope=scope, provider=provider)


_PROVIDER_BYTES = (bytes, str, bytearray)
"""What ``feed`` takes: one provider event as received."""


class _NotProviderBytes(Exception):
    """``feed`` was handed something other than a provider event's bytes (a parsed dict, None)."""

    def __init__(self, got: str, *, argument: str = "raw") -> None:
        super().__init__(got)
        self.got = got
        self.argument = argument

    def message(self) -> str:
        if self.argument == "at_ms":
            return f"feed() at_ms must be a number of milliseconds (int or float) or None, not {self.got}"
        return (
            f"feed() takes one provider event as received — bytes or str, the SSE data: payload unchanged — "
            f"not {self.got}: a translator reads the provider's own bytes (duplicate deliveries are compared "
            "and bad events dead-lettered byte for byte), so pass the line, not a parsed object"
        )


def _fallback_run_id(raw: bytes | str | bytearray) -> str:
    """A deterministic run id when neither the caller nor the stream names one."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw  # lone surrogates hash too
    return "run-" + hashlib.sha256(data).hexdigest()[:16]
