"""Building ``reasoning.raw.v1`` records from a provider capture: what an ingress sends.

Used by ``make run`` (the demo publisher), the integration tests and the
benchmarks; a production ingress does the same with live SSE frames.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from reasonwire.contracts.envelope import (
    HEADER_CONTROL,
    HEADER_ISSUER_PROVIDER,
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
from reasonwire.workers.io.sse import ProviderEvent


@dataclass(frozen=True)
class RunEnvelope:
    """Who a run belongs to: the headers every raw record of the run carries."""

    grammar: str
    run_id: str
    thread_id: str
    tenant: str = "default"
    model: str | None = None
    issuer_scope: str | None = None
    issuer_provider: str | None = None
    """The provider behind a grammar many providers speak (``rw-issuer-provider``, ``contracts/issuers.py``)."""

    def headers(self, seq: int, *, sse_event: str | None = None, control: Control | None = None) -> list[tuple[str, bytes]]:
        pairs = [
            (HEADER_PROVIDER, self.grammar),
            (HEADER_RUN_ID, self.run_id),
            (HEADER_THREAD_ID, self.thread_id),
            (HEADER_TENANT, self.tenant),
            (HEADER_SEQ, str(seq)),
            (HEADER_MODEL, self.model),
            (HEADER_ISSUER_SCOPE, self.issuer_scope),
            (HEADER_ISSUER_PROVIDER, self.issuer_provider),
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


class SSEFramer:
    """Incremental SSE / JSONL framing for a live stream (sans-I/O): lines in, provider events out.

    Unlike :func:`reasonwire.workers.io.sse.read_events`, which reads a whole capture, this is fed a
    stream as it arrives, so each event is published the moment its frame completes.
    A line is either an SSE field (``event:``/``data:``/``id:``/``retry:``/comment,
    WHATWG framing: an event ends at a blank line) or a bare ``data:`` payload as an
    SDK's ``iter_lines`` hands it over (one event per line). ``[DONE]`` is a transport
    sentinel, not an event. Payload bytes are never decoded or re-encoded beyond the
    framing (R3).
    """

    def __init__(self, max_event_bytes: int | None = None) -> None:
        self._partial = bytearray()
        """The line still incomplete: grown in place (a 50 MB line is not copied per chunk)."""
        self._event: str | None = None
        self._data: list[bytes] = []
        self._data_bytes = 0
        self.lines_read = 0
        """Complete lines framed so far: an event is named by the line its payload starts on, as
        ``translate`` names it (the first line is 1)."""
        self._start = 0
        self.event_lines: deque[int] = deque()
        """The starting line of each event returned and not yet taken (:meth:`take_lines`), in order."""
        self.max_event_bytes = max_event_bytes
        """A payload larger than this raises :class:`EventTooLarge` as soon as it is certain — a
        line that long is refused while it is still arriving, never held whole."""

    def feed(self, chunk: bytes) -> list[tuple[bytes, str | None]]:
        """Arbitrary chunks of a byte stream (an HTTP body): a trailing partial line waits."""
        before = len(self._partial)
        self._partial += chunk
        cut = chunk.rfind(b"\n")  # only the new bytes are searched: a long line costs O(its length)
        if cut < 0:
            if self.max_event_bytes is not None and len(self._partial) - len(b"data: ") > self.max_event_bytes:
                raise EventTooLarge(len(self._partial) - len(b"data: "), self.max_event_bytes)
            return []
        cut += before
        lines = bytes(self._partial[:cut]).split(b"\n")
        del self._partial[: cut + 1]
        return [e for line in lines for e in self.line(line)]

    def line(self, raw: bytes) -> list[tuple[bytes, str | None]]:
        """One complete line (its newline already removed, or not)."""
        self.lines_read += 1
        line = raw.rstrip(b"\r\n")
        if not line:
            return self._dispatch()
        name, sep, value = line.partition(b":")
        if sep and name in (b"event", b"data", b"id", b"retry", b""):
            value = value[1:] if value.startswith(b" ") else value
            if name == b"event":
                out = self._dispatch() if self._data else []  # a stream without blank lines still splits
                self._event = value.decode("utf-8", "replace")
                return out
            if name == b"data":
                if not self._data:
                    self._start = self.lines_read
                self._data.append(value)
                self._data_bytes += len(value) + 1
                self._check(self._data_bytes - 1)
            return []
        out = self._dispatch()
        self._start = self.lines_read
        return [*out, *self._payload(line, None)]

    def take_lines(self, count: int) -> list[int]:
        """The starting lines of the next ``count`` events returned (oldest first)."""
        return [self.event_lines.popleft() for _ in range(count)]

    def finish(self) -> list[tuple[bytes, str | None]]:
        """End of stream: a last frame without its blank line (or newline) still counts."""
        tail, self._partial = bytes(self._partial), bytearray()
        return [*(self.line(tail) if tail.strip() else []), *self._dispatch()]

    def _dispatch(self) -> list[tuple[bytes, str | None]]:
        data, event = self._data, self._event
        self._data, self._event, self._data_bytes = [], None, 0
        return self._payload(b"\n".join(data), event) if data else []

    def _payload(self, data: bytes, event: str | None) -> list[tuple[bytes, str | None]]:
        self._check(len(data))
        if data.strip() == b"[DONE]":
            return []
        self.event_lines.append(self._start)
        return [(data, event)]

    def _check(self, size: int) -> None:
        if self.max_event_bytes is not None and size > self.max_event_bytes:
            raise EventTooLarge(size, self.max_event_bytes)


class EventTooLarge(ValueError):
    """A provider event larger than the raw topic takes: a client error that no retry can cure
    (HTTP 413), found before the record is sent."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"a provider event of at least {size:,} bytes exceeds the per-event limit of {limit:,} bytes")
        self.size = size
        self.limit = limit


class IngressError(RuntimeError):
    """The broker did not take a record: the run's records are not all published (nothing silent)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        """The broker was away (no acknowledgement in time): the same records may go through later."""
