"""Escaped UTF-16 surrogate halves split across two provider events.

A provider (or a proxy) may cut a delta between the two halves of a character
outside the Basic Multilingual Plane: ``"delta":"\\ud83d"`` then
``"delta":"\\ude00"``. Each event is valid JSON, and the providers' own SDKs
(Python's ``json``, JavaScript's ``JSON.parse``) accept it; ``orjson`` refuses a
lone half. So the translator base reads such an event with the standard library
(:func:`loads_with_lone_surrogates`), only where a lone half sits in a text field,
and the producer discipline joins the halves across deltas (:func:`whole`) so the
emitted text is the character itself — never a lone half, which no UTF-8 encoder
can write.
"""

from __future__ import annotations

import json
import re
from typing import Any

TEXT_FIELDS = frozenset(
    {"delta", "text", "thinking", "partial_json", "arguments", "refusal", "input", "content", "reasoning_content", "reasoning", "summary"}
)
"""The fields that carry streamed text in the six grammars (the only place a cut can fall)."""

REPLACEMENT = "\ufffd"


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogate(text: str) -> bool:
    """Called on every streamed text: an ASCII string (the common case) is answered by one
    C-level check, any other by a regex scan — a per-character Python loop cost ~9 steps
    per raw record."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def whole(text: str) -> str:
    """Join surrogate pairs into their characters; a half with no partner becomes U+FFFD."""
    if not has_surrogate(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def scrub(value: Any) -> Any:
    """``value`` (JSON-like) with every string made whole: for provider-native blocks kept in a
    record, which must be writable as UTF-8 JSON (a text field that ended on a cut half)."""
    if isinstance(value, str):
        return whole(value)
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def split_high(text: str) -> tuple[str, str]:
    """(text without a trailing high surrogate, that surrogate or ""): the half waits for its partner."""
    if text and "\ud800" <= text[-1] <= "\udbff":
        return text[:-1], text[-1]
    return text, ""


def loads_with_lone_surrogates(raw: bytes | str | bytearray, error: Exception) -> Any:
    """The event, when orjson refused it only for a lone surrogate in a text field; else None."""
    if "surrogate" not in str(error):
        return None
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return obj if _halves_only_in_text(obj, None) else None


def _halves_only_in_text(value: Any, key: str | None, depth: int = 0) -> bool:
    """Lone halves anywhere else (an id, a name) would reach the wire unjoinable: refused as before."""
    if depth > 64:
        return False
    if isinstance(value, str):
        return key in TEXT_FIELDS or not has_surrogate(value)
    if isinstance(value, dict):
        return all(
            isinstance(k, str) and not has_surrogate(k) and _halves_only_in_text(v, k, depth + 1)
            for k, v in value.items()
        )
    if isinstance(value, list):
        return all(_halves_only_in_text(v, key, depth + 1) for v in value)
    return True
