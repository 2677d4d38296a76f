"""Audience filtering of one run's AG-UI stream, by policy (P1, P7, P8).

A filter sees the run's events in order and lets through what its audience
may see. It removes whole units, never parts of them, so what it lets through
is still a valid AG-UI stream (R1, R2): a reasoning message it hides loses its
``START``, every ``CONTENT`` and its ``END``; with visibility ``none`` the
spans go too. ``REASONING_ENCRYPTED_VALUE`` passes only where the rule allows
it, and ``rawEvent`` never passes.

Provenance comes from ``REASONING_MESSAGE_START.metadata.reasonwire``:
``reasoningKind`` (``summary`` | ``raw`` | ``redacted`` | ``none``) and
``reasoningKindAssumed`` (a translator that could not know the kind). Under
``summary`` visibility only messages that are *known* summaries pass; an
assumed kind is treated as raw.
"""

from __future__ import annotations

from reasonwire.contracts.policy import AudienceRule, ReasoningVisibility
from reasonwire.workers.core.discipline import METADATA_KEY
from reasonwire.workers.core.events import WireEvent

_SPAN_EVENTS = frozenset({"REASONING_START", "REASONING_END"})
_MESSAGE_EVENTS = frozenset({"REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END", "REASONING_MESSAGE_CHUNK"})


class AudienceFilter:
    """Per-run, per-audience filter; feed it every event of the run in order."""

    def __init__(self, rule: AudienceRule) -> None:
        self.rule = rule
        self._hidden: set[str] = set()
        self.removed = 0
        self._all = self.passes_everything

    @property
    def passes_everything(self) -> bool:
        return self.rule.reasoning is ReasoningVisibility.ALL and self.rule.encrypted_values

    def admit(self, event: WireEvent) -> WireEvent | None:
        """The event as this audience may see it (a wire dict, ``reasonwire.workers.core.events``), or None."""
        if self._all and "rawEvent" not in event:
            return event
        kept = self._admit(event)
        if kept is None:
            self.removed += 1
        elif "rawEvent" in kept:
            kept = {k: v for k, v in kept.items() if k != "rawEvent"}
        return kept

    def _admit(self, event: WireEvent) -> WireEvent | None:
        kind = event["type"]
        if kind == "REASONING_ENCRYPTED_VALUE":
            return event if self.rule.encrypted_values else None
        visibility = self.rule.reasoning
        if kind in _SPAN_EVENTS:
            return None if visibility is ReasoningVisibility.NONE else event
        if kind == "REASONING_MESSAGE_START":
            if self._visible(event):
                return event
            self._hidden.add(event["messageId"])
            return None
        if kind in _MESSAGE_EVENTS:
            return None if event["messageId"] in self._hidden else event
        return event

    def _visible(self, start: WireEvent) -> bool:
        visibility = self.rule.reasoning
        if visibility is ReasoningVisibility.ALL:
            return True
        if visibility is ReasoningVisibility.NONE:
            return False
        facts = (start.get("metadata") or {}).get(METADATA_KEY, {})
        return facts.get("reasoningKind") == "summary" and not facts.get("reasoningKindAssumed", False)
