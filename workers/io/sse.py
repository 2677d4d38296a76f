"""Reading provider captures: one JSON event per line, or raw SSE (``event:``/``data:``).

An input adapter, not part of the core: it turns a text capture into the
sequence of ``(line_number, sse_event_name, data_payload)`` the translator is fed.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class ProviderEvent:
    """One provider event as it arrived: its payload bytes and the SSE event name, if any."""

    line: int
    """1-based line of the input where the event's payload started."""
    data: bytes
    sse_event: str | None = None


def read_events(lines: Iterable[str]) -> Iterator[ProviderEvent]:
    """Yield provider events from JSONL or an SSE capture (detected from the first line)."""
    it = iter(enumerate(lines, start=1))
    for number, line in it:
        stripped = line.rstrip("\r\n")
        if not stripped.strip():
            continue
        if _is_sse_field(stripped):
            yield from _read_sse([(number, stripped)], it)
        else:
            yield ProviderEvent(number, stripped.encode())
            for n, rest in it:
                rest = rest.rstrip("\r\n")
                if rest.strip():
                    yield ProviderEvent(n, rest.encode())
        return


def _is_sse_field(line: str) -> bool:
    return line.startswith(("event:", "data:", "id:", "retry:", ":"))


def _read_sse(first: list[tuple[int, str]], rest: Iterator[tuple[int, str]]) -> Iterator[ProviderEvent]:
    """SSE framing (WHATWG): fields until a blank line; multi-line data joined with newlines."""
    event: str | None = None
    data: list[str] = []
    start = 0

    def pending() -> Iterator[ProviderEvent]:
        if data and data != ["[DONE]"]:  # [DONE] is a transport sentinel, not an event
            yield ProviderEvent(start, "\n".join(data).encode(), event)

    for number, raw in itertools.chain(first, ((n, line.rstrip("\r\n")) for n, line in rest)):  # lazily: a live stream
        if not raw:
            yield from pending()
            event, data = None, []
            continue
        name, _, value = raw.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            if not data:
                start = number
            data.append(value)
    yield from pending()
