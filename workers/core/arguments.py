"""Argument checks for the public library API (``from reasonwire import …``).

A caller's mistake — a parsed dict where the provider's bytes belong, a grammar name where a
target object was expected, ``None`` for a list — gets one clear ``TypeError`` / ``ValueError``
naming the argument and what it accepts, raised before any state is touched, instead of an
``AttributeError`` deep inside or a run ended as a reasonwire bug. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any


def type_name(value: Any) -> str:
    """What a wrong argument is, for the message (its type, never its value: it may be content, P8)."""
    return "None" if value is None else type(value).__name__


def expect(value: Any, types: type | tuple[type, ...], *, name: str, accepts: str) -> None:
    """``TypeError`` unless ``value`` is an instance of ``types`` (``bool`` is not an ``int`` here)."""
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in _as_tuple(types)):
        return
    raise TypeError(f"{name} must be {accepts}, not {type_name(value)}")


def expect_optional_str(value: Any, *, name: str) -> None:
    """``TypeError`` unless ``value`` is a string or None."""
    if value is not None:
        expect(value, str, name=name, accepts="a string or None")


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)
