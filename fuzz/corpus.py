"""Seed streams: the in-repo fixtures, read the way ``reasonwire translate`` reads them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import orjson

from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.io.sse import read_events

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
GRAMMARS: tuple[str, ...] = tuple(g.value for g in Grammar)


@dataclass(frozen=True)
class Line:
    """One provider event as the translator is fed it: payload and SSE event name."""

    data: bytes | str
    sse_event: str | None = None


Stream = list[Line]


def sse_name(grammar: str, data: bytes) -> str | None:
    """The SSE ``event:`` name a real capture would carry for this payload (None: no names)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    if grammar in ("openai-responses", "anthropic-messages"):
        value = obj.get("type")
    elif grammar == "gemini-interactions":
        value = obj.get("event_type")
    elif grammar == "bedrock-converse":  # the :event-type header names the union member
        value = next(iter(obj), None) if len(obj) == 1 else None
    else:  # generateContent chunks carry no event name
        value = None
    return value if isinstance(value, str) else None


@cache
def seeds(grammar: str) -> tuple[tuple[Line, ...], ...]:
    """Every fixture stream of ``grammar`` (whatever is present), SSE names attached."""
    out = []
    for path in sorted((FIXTURES / grammar).glob("*.jsonl")):
        with path.open(encoding="utf-8") as f:
            events = [e.data for e in read_events(f)]
        out.append(tuple(Line(d, sse_name(grammar, d)) for d in events))
    if not out:
        raise SystemExit(f"fuzz: no seed streams in {FIXTURES / grammar}")
    return tuple(out)


@cache
def handler_names(grammar: str) -> tuple[str, ...]:
    """The event types a grammar's translator dispatches on (to route payloads by SSE name)."""
    from reasonwire.workers.translators import translator_class

    return tuple(sorted(translator_class(grammar).HANDLERS))
