"""Building ``reasoning.raw.v1`` records from a provider capture: what an ingress sends.

Used by ``make run`` (the demo publisher), the integration tests and the
benchmarks; a production ingress does the same with live SSE frames.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from contracts.envelope import (
    HEADER_CONTROL,
    HEADER_ISSUER_SCOPE,
    HEADER_MODEL,
    HEADER_PROVIDER,
    HEADER_RUN_ID,
    HEADER_SEQ,
    HEADER_SSE_EVENT,
    HEADER_TENANT,
    HEADER_THREAD_ID,
    Control,
)
from workers.sse import ProviderEvent


@dataclass(frozen=True)
class RunEnvelope:
    """Who a run belongs to: the headers every raw record of the run carries."""

    grammar: str
    run_id: str
    thread_id: str
    tenant: str = "default"
    model: str | None = None
    issuer_scope: str | None = None

    def headers(self, seq: int, *, sse_event: str | None = None, control: Control | None = None) -> list[tuple[str, bytes]]:
        pairs = [
            (HEADER_PROVIDER, self.grammar),
            (HEADER_RUN_ID, self.run_id),
            (HEADER_THREAD_ID, self.thread_id),
            (HEADER_TENANT, self.tenant),
            (HEADER_SEQ, str(seq)),
            (HEADER_MODEL, self.model),
            (HEADER_ISSUER_SCOPE, self.issuer_scope),
            (HEADER_SSE_EVENT, sse_event),
            (HEADER_CONTROL, control.value if control else None),
        ]
        return [(name, value.encode()) for name, value in pairs if value is not None]


@dataclass(frozen=True)
class OutgoingRecord:
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]]


def raw_records(run: RunEnvelope, events: Iterable[ProviderEvent], *, end: Control | None = Control.END) -> Iterator[OutgoingRecord]:
    """One record per provider event, bytes unchanged, then (optionally) the end control record."""
    seq = 0
    for event in events:
        yield OutgoingRecord(run.run_id.encode(), event.data, run.headers(seq, sse_event=event.sse_event))
        seq += 1
    if end is not None:
        yield OutgoingRecord(run.run_id.encode(), None, run.headers(seq, control=end))
