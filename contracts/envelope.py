"""The raw input record on ``reasoning.raw.v1``: headers around unchanged provider bytes.

The record value is the provider's SSE ``data:`` payload exactly as received (one
provider event per record); everything reasonwire needs to route and attribute it
travels in headers so the value is never re-encoded. Header values are UTF-8.
"""

from enum import StrEnum
from typing import Final

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
