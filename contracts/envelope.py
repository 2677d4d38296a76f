"""The raw input record on ``reasoning.raw.v1``: headers around unchanged provider bytes.

The record value is the provider's SSE ``data:`` payload exactly as received (one
provider event per record); everything reasonwire needs to route and attribute it
travels in headers so the value is never re-encoded. Header values are UTF-8.
"""

from collections.abc import Mapping
from enum import StrEnum
from typing import Final, NamedTuple

HEADER_PROVIDER: Final = "rw-provider"
"""Grammar name (:class:`contracts.grammars.Grammar` value); selects the translator."""
HEADER_RUN_ID: Final = "rw-run-id"
"""The run this event belongs to; equals the record key so one partition owns a run."""
HEADER_THREAD_ID: Final = "rw-thread-id"
"""The conversation; artefacts are indexed per thread for the next turn's replay."""
HEADER_TENANT: Final = "rw-tenant"
"""Namespace for stored state; replay never crosses it."""
HEADER_SEQ: Final = "rw-seq"
"""0-based position of this event within the run; detects duplicates and gaps."""
HEADER_MODEL: Final = "rw-model"
"""The requested model; part of the artefact issuer (R8)."""
HEADER_ISSUER_SCOPE: Final = "rw-issuer-scope"
"""Optional account / key / region / endpoint the provider binds artefacts to (R8)."""
HEADER_SSE_EVENT: Final = "rw-sse-event"
"""Optional SSE ``event:`` name, when the ingress saw one."""
HEADER_CONTROL: Final = "rw-control"
"""Marks a control record (no provider bytes): see :class:`Control`."""

HEADER_EVENT_SEQ: Final = "rw-event-seq"
"""On ``reasoning.events.v1``: 0-based index of the AG-UI event within its run (dedupe)."""
HEADER_REASON: Final = "rw-dlq-reason"
"""On ``reasoning.dlq.v1``: why the record was dead-lettered."""


class Control(StrEnum):
    """What a control record tells the normalizer about the run's ingress."""

    END = "end"
    """The provider stream ended; a run without a terminal event is interrupted."""
    ABORT = "abort"
    """The ingress saw the connection drop: close the run as interrupted."""


class RawEnvelope(NamedTuple):
    """The validated headers of one raw record; built by :func:`read_envelope` (a tuple:
    one is built per raw record)."""

    grammar: str
    run_id: str
    thread_id: str
    tenant: str
    seq: int
    model: str | None
    issuer_scope: str | None
    sse_event: str | None
    control: Control | None


_ENVELOPE_HEADERS = (
    HEADER_RUN_ID,
    HEADER_PROVIDER,
    HEADER_SEQ,
    HEADER_CONTROL,
    HEADER_THREAD_ID,
    HEADER_TENANT,
    HEADER_MODEL,
    HEADER_ISSUER_SCOPE,
    HEADER_SSE_EVENT,
)


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class EnvelopeError(ValueError):
    """The record's headers break this contract; the record is dead-lettered with this reason."""


DEFAULT_TENANT: Final = "default"


def read_envelope(headers: Mapping[str, bytes | None], known_grammars: frozenset[str]) -> RawEnvelope:
    """Validate a raw record's headers at the boundary (contract ``reasoning.raw.v1``).

    Required: ``rw-provider`` naming a known grammar, ``rw-run-id``, ``rw-seq`` (a
    non-negative integer). ``rw-thread-id`` defaults to the run id and ``rw-tenant``
    to ``default``.
    """

    ours: list[tuple[str, bytes]] = [(name, value) for name in _ENVELOPE_HEADERS if (value := headers.get(name))]
    try:  # one pass over our headers (others are not ours to judge): this runs for every raw record
        decoded = {name: value.decode("utf-8") for name, value in ours}
    except UnicodeDecodeError:
        bad = next(name for name, value in ours if not _is_utf8(value))
        raise EnvelopeError(f"header {bad} is not UTF-8") from None
    text = decoded.get

    run_id = text(HEADER_RUN_ID)
    if run_id is None:
        raise EnvelopeError(f"missing header {HEADER_RUN_ID}")
    grammar = text(HEADER_PROVIDER)
    if grammar is None:
        raise EnvelopeError(f"missing header {HEADER_PROVIDER}")
    if grammar not in known_grammars:
        raise EnvelopeError(f"unknown grammar {grammar!r} in {HEADER_PROVIDER}")
    seq_text = text(HEADER_SEQ)
    if seq_text is None or not (seq_text.isascii() and seq_text.isdigit()):  # "²".isdigit(), and int("²") raises
        raise EnvelopeError(f"header {HEADER_SEQ} missing or not a non-negative integer")
    control_text = text(HEADER_CONTROL)
    try:
        control = Control(control_text) if control_text is not None else None
    except ValueError:
        raise EnvelopeError(f"unknown control {control_text!r} in {HEADER_CONTROL}") from None
    return RawEnvelope(
        grammar=grammar,
        run_id=run_id,
        thread_id=text(HEADER_THREAD_ID) or run_id,
        tenant=text(HEADER_TENANT) or DEFAULT_TENANT,
        seq=int(seq_text),
        model=text(HEADER_MODEL),
        issuer_scope=text(HEADER_ISSUER_SCOPE),
        sse_event=text(HEADER_SSE_EVENT),
        control=control,
    )
