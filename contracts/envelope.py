"""The raw input record on ``reasoning.raw.v1``: headers around unchanged provider bytes.

The record value is the provider's SSE ``data:`` payload exactly as received (one
provider event per record); everything reasonwire needs to route and attribute it
travels in headers so the value is never re-encoded. Header values are UTF-8.
"""

from collections.abc import Mapping
from enum import StrEnum
from typing import Final, NamedTuple

HEADER_PROVIDER: Final = "rw-provider"
"""Grammar name (:class:`reasonwire.contracts.grammars.Grammar` value); selects the translator."""
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
HEADER_ISSUER_PROVIDER: Final = "rw-issuer-provider"
"""Optional: the provider (and model family) behind a grammar that many providers speak —
``deepseek``, ``glm``, ``qwen``, ``kimi``, ``mistral``, ``vllm``, ``ollama:<model>``, … for
``openai-chat-completions`` (values: ``reasonwire.contracts.issuers``). It becomes
``Issuer.provider`` of the run's artefacts (R8) and decides whether readable reasoning is
replay state. Optional within ``reasoning.raw.v1`` (a v1 reader ignores headers it does not
know); absent, the translator derives it (``issuers.provider_from_stream``)."""
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
    issuer_provider: str | None = None


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
    HEADER_ISSUER_PROVIDER,
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

    # Runs for every raw record: one lookup and one decode per header, no intermediate
    # containers (an empty value counts as absent, as a missing one).
    get = headers.get
    raw_run_id, raw_grammar, raw_seq, raw_control = get(HEADER_RUN_ID), get(HEADER_PROVIDER), get(HEADER_SEQ), get(HEADER_CONTROL)
    raw_thread, raw_tenant, raw_model = get(HEADER_THREAD_ID), get(HEADER_TENANT), get(HEADER_MODEL)
    raw_scope, raw_sse, raw_issuer = get(HEADER_ISSUER_SCOPE), get(HEADER_SSE_EVENT), get(HEADER_ISSUER_PROVIDER)
    try:
        run_id = raw_run_id.decode() if raw_run_id else None
        grammar = raw_grammar.decode() if raw_grammar else None
        seq_text = raw_seq.decode() if raw_seq else None
        control_text = raw_control.decode() if raw_control else None
        thread_id = raw_thread.decode() if raw_thread else None
        tenant = raw_tenant.decode() if raw_tenant else None
        model = raw_model.decode() if raw_model else None
        issuer_scope = raw_scope.decode() if raw_scope else None
        sse_event = raw_sse.decode() if raw_sse else None
        issuer_provider = raw_issuer.decode() if raw_issuer else None
    except UnicodeDecodeError:
        bad = next(name for name in _ENVELOPE_HEADERS if (value := get(name)) and not _is_utf8(value))
        raise EnvelopeError(f"header {bad} is not UTF-8") from None

    if run_id is None:
        raise EnvelopeError(f"missing header {HEADER_RUN_ID}")
    if grammar is None:
        raise EnvelopeError(f"missing header {HEADER_PROVIDER}")
    if grammar not in known_grammars:
        raise EnvelopeError(f"unknown grammar {grammar!r} in {HEADER_PROVIDER}")
    if seq_text is None or not (seq_text.isascii() and seq_text.isdigit()):  # "²".isdigit(), and int("²") raises
        raise EnvelopeError(f"header {HEADER_SEQ} missing or not a non-negative integer")
    try:
        control = Control(control_text) if control_text is not None else None
    except ValueError:
        raise EnvelopeError(f"unknown control {control_text!r} in {HEADER_CONTROL}") from None
    return RawEnvelope(grammar, run_id, thread_id or run_id, tenant or DEFAULT_TENANT, int(seq_text), model, issuer_scope, sse_event, control, issuer_provider)
