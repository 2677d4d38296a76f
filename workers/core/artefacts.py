"""The artefact ledger: opaque values between arrival and the close of their unit.

A provider often sends the opaque value before the unit it belongs to is
finished (Anthropic's ``signature_delta`` comes just before ``content_block_stop``;
a Bedrock signature before ``contentBlockStop``). The ledger holds it until the
unit closes, then emits it once as ``REASONING_ENCRYPTED_VALUE`` and as a
complete :class:`~reasonwire.contracts.artefacts.ArtefactRecord`. If the run ends first, the
held values become records marked incomplete — stored so nothing is lost, never
announced to the client and never replayable (P5). One behaviour for every
grammar, in one place.

An *empty* value is no value: a provider that sends ``signature: ""`` (or an empty
``thoughtSignature``, redacted ``data``) has left its unit unsigned, and replaying
``""`` is answered with "Invalid signature". The ledger never announces it and
never records it complete: it is kept as an incomplete record of its unit (so
replay knows the unit was meant to be signed and can refuse an open tool loop
that needs it), and never replaces a real value held for the same unit.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from reasonwire.contracts.artefacts import ArtefactRecord, ArtefactSubtype, Issuer, NativeBlock
from reasonwire.workers.core.discipline import StreamDiscipline
from reasonwire.workers.core.surrogates import scrub


@dataclass
class HeldArtefact:
    """A value whose unit is still open; the translator may still fill in ``native``."""

    kind: str
    subtype: ArtefactSubtype
    entity_id: str
    value: str
    native: NativeBlock
    refresh: Callable[[], dict[str, Any]] | None = None
    """``native`` fields that keep growing while the unit is open (Bedrock's reasoning text):
    computed once, when the record is made, instead of on every value that arrives (which
    made a stream of many signatures quadratic)."""
    announce: bool = True
    """False for readable replay state (DeepSeek's ``reasoning_content``, an OpenRouter summary):
    stored and replayed like an opaque value, never sent as ``REASONING_ENCRYPTED_VALUE`` — it is
    not encrypted, and its text already reached the audiences allowed to read it."""
    provider: str | None = None
    """The issuer's provider when it is not the run's (an OpenRouter ``reasoning_details`` item
    names its own: ``openrouter:<format>``); None: the run's issuer."""


class ArtefactLedger:
    """Turns opaque values into AG-UI events and artefact records, once each (R3)."""

    def __init__(self, discipline: StreamDiscipline, issuer: Issuer) -> None:
        self._run = discipline
        self._issuer = issuer
        self._held: dict[Hashable, HeldArtefact] = {}
        self._unsigned: dict[Hashable, HeldArtefact] = {}
        """Units that received an empty value: recorded incomplete when they close."""
        self._records: list[ArtefactRecord] = []

    @property
    def pending(self) -> bool:
        """Whether records are waiting to be drained."""
        return bool(self._records)

    def drain(self) -> list[ArtefactRecord]:
        out, self._records = self._records, []
        return out

    def hold(self, key: Hashable, artefact: HeldArtefact) -> bool:
        """Keep a value until its unit closes. A second value for the same unit replaces
        the first: providers *assign* signatures (the Anthropic SDK does), never append.
        An empty value is not held (see the module docstring); returns whether it was."""
        if not artefact.value:
            if key not in self._held:
                self._unsigned[key] = artefact
            return False
        self._unsigned.pop(key, None)
        self._held[key] = artefact
        return True

    def held(self, key: Hashable) -> HeldArtefact | None:
        """The real value held for the unit, if any (an empty one does not count)."""
        return self._held.get(key)

    def release(self, key: Hashable, **native_updates: Any) -> None:
        """The unit closed: emit the held value (if any) as event and complete record."""
        held = self._held.pop(key, None)
        if held is None:
            unsigned = self._unsigned.pop(key, None)
            if unsigned is not None:
                _refresh(unsigned)
                self._records.append(self._record(unsigned, complete=False))
            return
        _refresh(held)
        for name, value in native_updates.items():  # the held block is ours alone: fill it in place
            setattr(held.native, name, value)
        self.emit(held)

    def emit(self, artefact: HeldArtefact) -> None:
        """Emit a value whose unit is already complete (e.g. Anthropic redacted thinking)."""
        if not artefact.value:  # empty: never announced, never complete
            self._records.append(self._record(artefact, complete=False))
            return
        if artefact.announce:
            self._run.encrypted_value(artefact.subtype, artefact.entity_id, artefact.value)
        self._records.append(self._record(artefact, complete=True))

    def abandon_all(self) -> None:
        """The run ended with units open: keep their values as incomplete records."""
        for held in [*self._held.values(), *self._unsigned.values()]:
            _refresh(held)
            self._records.append(self._record(held, complete=False))
        self._held.clear()
        self._unsigned.clear()

    def _record(self, artefact: HeldArtefact, *, complete: bool) -> ArtefactRecord:
        if self._run.join_surrogates:  # a text the block kept may end on a cut half: not writable as UTF-8
            artefact.native.block = scrub(artefact.native.block)
        return ArtefactRecord(
            kind=artefact.kind,
            subtype=artefact.subtype,
            entity_id=artefact.entity_id,
            value=artefact.value,
            issuer=self._issuer if artefact.provider is None else _with_provider(self._issuer, artefact.provider),
            native=artefact.native,
            run_id=self._run.run_id,
            thread_id=self._run.thread_id,
            complete=complete,
        )


def _with_provider(issuer: Issuer, provider: str) -> Issuer:
    return issuer if issuer.provider == provider else issuer.model_copy(update={"provider": provider})


def _refresh(held: HeldArtefact) -> None:
    if held.refresh is not None:
        for name, value in held.refresh().items():
            setattr(held.native, name, value)
