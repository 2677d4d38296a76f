"""Errors of the sans-I/O core. Their messages name fields and lines, never values (P8)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reasonwire.workers.core.limits import MAX_TOKEN_COUNT


class ProviderGrammarError(Exception):
    """A provider stream broke its own grammar (R7): the run ends with ``RUN_ERROR``.

    ``line`` is the 1-based position of the offending event in the run; the
    translator fills it in when the handler does not know it.
    """

    def __init__(self, reason: str, *, line: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}" if self.line is not None else self.reason


def require(obj: Any, key: str, kind: type | tuple[type, ...], *, where: str) -> Any:
    """``obj[key]`` if it is a ``kind``, else a :class:`ProviderGrammarError` naming the field.

    Handlers use this instead of indexing so that a malformed known event becomes
    a clear R7 error rather than a bare ``KeyError`` from deep inside.
    """
    value = obj.get(key) if type(obj) is dict or isinstance(obj, Mapping) else None  # dict first: no ABC check
    if type(value) is kind:  # the common case, and never a bool posing as an int
        return value
    if not isinstance(value, kind) or isinstance(value, bool) and kind in (int, (int,)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ProviderGrammarError(f"{where}: field {key!r} missing or not {names}")
    return value


def optional(obj: Any, key: str, kind: type | tuple[type, ...], *, where: str) -> Any:
    """Like :func:`require`, but an absent or null field is ``None``."""
    if not (type(obj) is dict or isinstance(obj, Mapping)) or obj.get(key) is None:
        return None
    return require(obj, key, kind, where=where)


def token_count(usage: Any, key: str, *, where: str, absent: int | None = None) -> int | None:
    """A provider token count: a non-negative integer, or ``absent`` when the field is missing.

    A count that is present but not a count (a string, a negative number, a bool, or one
    beyond AG-UI's range ``0 … 2^53−1``, ``reasonwire.workers.core.limits``) is a malformed known event
    (R7), never silently read as 0 or as unknown, nor clamped to a number nobody reported.
    """
    if not (type(usage) is dict or isinstance(usage, Mapping)):
        return absent
    value = usage.get(key)
    if value is None:
        return absent
    if type(value) is not int and (not isinstance(value, int) or isinstance(value, bool)) or not 0 <= value <= MAX_TOKEN_COUNT:
        raise ProviderGrammarError(f"{where}: field {key!r} is not a token count")
    return value


MAX_INDEX = 2**31 - 1
"""Largest position a provider index field may name (an output item, block, part or step). No
response holds anywhere near this many units; the bound keeps hostile values out of list
lookups and minted ids."""


def require_index(obj: Any, key: str, *, where: str) -> int:
    """A provider index field (``output_index``, ``index``, ``contentBlockIndex`` …): an integer in
    ``0 … MAX_INDEX``. Anything else — missing, mistyped, negative, absurdly large — is a malformed
    known event (R7), never a lookup that fails deep inside a handler."""
    value = require(obj, key, int, where=where)
    if not 0 <= value <= MAX_INDEX:
        raise ProviderGrammarError(f"{where}: field {key!r} is not an index (out of range)")
    return value


def optional_index(obj: Any, key: str, *, where: str) -> int | None:
    """Like :func:`require_index`, but an absent or null field is ``None``."""
    if not (type(obj) is dict or isinstance(obj, Mapping)) or obj.get(key) is None:
        return None
    return require_index(obj, key, where=where)
