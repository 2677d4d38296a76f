"""Explicit limits on hostile input, so no provider event can make the core or its serialization fail.

Why these numbers
-----------------
* ``MAX_NESTING`` — JSON arrays/objects nested in one provider event, and in a
  tool call's arguments (JSON inside a string). ``orjson.loads`` accepts 1,023
  levels, but ``orjson.dumps`` (the worker's ``event_json``) stops at 254 and
  pydantic's ``to_json`` (``record_json``: artefact ``native.block``, usage
  ``provider_raw``) somewhere below 300. Parts of an event are re-serialized
  inside records a few levels deep, so the limit sits well under both. No
  provider grammar nests more than a dozen levels; tool arguments deeper than
  this are refused rather than half-encoded. An event over the limit is a
  malformed event (R7); a tool call whose arguments are over it is incomplete.
* ``MAX_TOKEN_COUNT`` — AG-UI ``TokenUsage`` bounds every count to the JSON
  safe-integer range (0 … 2^53−1), because a larger number does not survive a
  round trip. A provider count outside it is not a token count (R7).

String sizes are not limited here: a record's size is bounded by the worker's
record-size limit, and the core never copies a value more than a constant number
of times.
"""

from __future__ import annotations

from typing import Any

import orjson

MAX_NESTING = 128
"""Deepest JSON nesting accepted in one provider event or one tool call's arguments."""

MAX_TOKEN_COUNT = 2**53 - 1
"""Largest token count AG-UI ``TokenUsage`` can carry (``Number.MAX_SAFE_INTEGER``)."""


def nesting_exceeds(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether a parsed JSON value nests more than ``limit`` arrays/objects (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if type(item) is dict:
            stack.extend((v, depth + 1) for v in item.values() if type(v) in (dict, list))
        elif type(item) is list:
            stack.extend((v, depth + 1) for v in item if type(v) in (dict, list))
    return False


def may_nest_deeper(text: bytes | str, limit: int = MAX_NESTING) -> bool:
    """Cheap pre-check on JSON text: fewer opening brackets than ``limit`` cannot nest deeper."""
    if isinstance(text, bytes):
        return text.count(b"{") + text.count(b"[") > limit
    return text.count("{") + text.count("[") > limit


def too_deep(text: bytes | str | bytearray, parsed: Any) -> bool:
    """Whether one parsed provider event (``parsed`` from ``text``) is over ``MAX_NESTING``.

    Once per provider event: :func:`may_nest_deeper`'s pre-check is written out here (one call
    per event instead of two, on the hot path)."""
    if isinstance(text, str):
        brackets = text.count("{") + text.count("[")
    else:  # bytes, or a bytearray a caller read into
        brackets = text.count(b"{") + text.count(b"[")
    return brackets > MAX_NESTING and nesting_exceeds(parsed)


def complete_json(text: str) -> bool:
    """Whether tool-call arguments are one whole JSON value within the limits.

    Strict RFC 8259 (orjson: no ``NaN``, no lone surrogate escapes), as a
    ``JSON.parse`` consumer will read them; never raises, however deep the text."""
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return not (may_nest_deeper(text) and nesting_exceeds(parsed))
