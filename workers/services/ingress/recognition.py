"""Is this stream the grammar it claims to be? One recognition for ``translate``, ``ingest`` and
``POST /v1/ingest``, so all three refuse the same streams. Sans-I/O.

A stream of another grammar is not malformed event by event — every event is simply
unknown to the translator — so published as it is it would end ``RUN_ERROR interrupted``
much later, with the cause lost. Instead the first events are held until one is
recognised (handled, or rejected as malformed by the grammar's own translator); nothing
recognised → one line, "this is not an X stream (…; it reads as Y)", before anything is
published or written. An input with no event at all is refused too ("input held no events").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import orjson

from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.core.translator import Translation, Translator
from reasonwire.workers.io.sse import ProviderEvent

HOLD_EVENTS = 64
"""Events held while none is recognised; past this the stream is refused (a real stream's
first event — ``response.created``, ``message_start``… — is recognised at once)."""

T = TypeVar("T")


class NotThisGrammar(ValueError):
    """The input is not a stream of the grammar it was given as (or holds no event); the message
    is the one line to show (event *types* only, never content: P8)."""


def unrecognised(translation: Translation) -> bool:
    """The translator did not know the event (and did not reject it as malformed)."""
    return translation.rejection is None and any(w.code == "unknown_event" for w in translation.warnings)


def reads_as(event: ProviderEvent, grammar: Grammar) -> str | None:
    """The other grammar whose translator handles ``event`` (pure: a throw-away translator each),
    to tell a user which ``--provider`` the stream is; None if none does."""
    from reasonwire.workers.translators import implemented, translator_for

    for other in implemented():
        if other is not grammar:
            translation = translator_for(other).feed(event.data, sse_event=event.sse_event)
            if translation.rejection is None and not unrecognised(translation):
                return other.value
    return None


def not_this_grammar(grammar: Grammar, first_type: str | None, other: str | None) -> str:
    article = "an" if grammar.value[0] in "aeiou" else "a"
    hint = f"; it reads as {other}" if other else ""
    return f"this is not {article} {grammar.value} stream (no event recognised; first event type: {first_type}{hint})"


NO_EVENTS = "input held no events"


class MalformedEvent(ValueError):
    """An event of a recognised stream that the grammar's translator rejects (R7: not JSON, not the
    grammar's shape): refused before its record is published, named by its input line as
    ``translate`` names it (the reason says what, never the content: P8)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"input line {line}: {reason}")
        self.line = line
        self.reason = reason


def event_type(event: ProviderEvent) -> str:
    """The first event's type as a user would recognise it (its name only, never its content, P8)."""
    if event.sse_event:
        return repr(event.sse_event[:60])
    try:
        obj = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        return "not JSON"
    if not isinstance(obj, dict):
        return f"a JSON {type(obj).__name__}, not an object"
    for key in ("type", "event_type"):
        if isinstance(obj.get(key), str):
            return repr(obj[key][:60])
    return f"an object with keys {', '.join(repr(k[:40]) for k in list(obj)[:3])}" if obj else "an empty object"


@dataclass
class GrammarGate(Generic[T]):
    """Holds a stream's first items until one of its events is recognised by ``translator``.

    :meth:`feed` returns what may go out now (``[]`` while holding; the held items and the new
    one once recognised; from then on each item at once); :meth:`finish` what is still held, or
    :class:`NotThisGrammar`. The item is whatever the caller publishes per event (a record, a
    translation); ``translator`` is the caller's own (``translate``) or a throw-away one (ingest).
    """

    translator: Translator
    hold: int | None = HOLD_EVENTS
    """None: hold to the end of input (``translate`` of a file)."""
    recognised: bool = False
    events: int = 0
    first_type: str | None = None
    first: ProviderEvent | None = None
    held: list[tuple[Translation, T]] = field(default_factory=list)

    def check(self, event: ProviderEvent) -> Translation:
        """Feed one event to the translator; raises :class:`NotThisGrammar` as soon as it is known
        the stream is not this grammar. Returns the translation (``translate`` emits it)."""
        self.events += 1
        if self.first_type is None:
            self.first_type = event_type(event)
        translation = self.translator.feed(event.data, sse_event=event.sse_event)
        if self.recognised:
            return translation
        if unrecognised(translation):
            self.first = self.first or event
            if self.hold is not None and self.events > self.hold:
                raise NotThisGrammar(self._refusal())
            return translation
        if translation.rejection is not None and self.events == 1 and (other := reads_as(event, self.translator.grammar)):
            raise NotThisGrammar(not_this_grammar(self.translator.grammar, self.first_type, other))  # e.g. Anthropic given as Bedrock
        self.recognised = True
        return translation

    def feed(self, event: ProviderEvent, item: T) -> list[tuple[Translation, T]]:
        """``event``'s translation with ``item`` (the caller's form of the event: a record, a line
        number), and any held before it, once recognised; ``[]`` while holding."""
        was = self.recognised
        translation = self.check(event)
        if not self.recognised:
            self.held.append((translation, item))
            return []
        if was:
            return [(translation, item)]
        out, self.held = [*self.held, (translation, item)], []
        return out

    def finish(self) -> list[tuple[Translation, T]]:
        """End of input: the held items if the stream was recognised, else :class:`NotThisGrammar`."""
        if self.events == 0:
            raise NotThisGrammar(NO_EVENTS)
        if not self.recognised:
            raise NotThisGrammar(self._refusal())
        out, self.held = self.held, []
        return out

    def _refusal(self) -> str:
        other = reads_as(self.first, self.translator.grammar) if self.first else None
        return not_this_grammar(self.translator.grammar, self.first_type, other)


def gate_for(grammar: str | Grammar) -> GrammarGate[T] | None:
    """A gate with a throw-away translator of ``grammar``; None for a grammar without a translator
    (nothing to recognise it by: its stream goes out unchecked)."""
    from reasonwire.workers.translators import implemented, translator_for

    if Grammar(grammar) not in implemented():
        return None
    return GrammarGate(translator_for(grammar))


def check_events(grammar: str | Grammar, events: Iterable[ProviderEvent]) -> None:
    """A whole capture checked at once (:class:`NotThisGrammar` if it is not ``grammar``)."""
    gate: GrammarGate[None] | None = gate_for(grammar)
    if gate is None:
        return
    for event in events:
        gate.feed(event, None)
        if gate.recognised:
            return
    gate.finish()
