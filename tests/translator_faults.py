"""A real translator with one of its methods replaced, for tests that inject a translator bug.

A proxy, not an attribute set on the instance: compiled by mypyc (``tools/build_native.py``),
a translator's methods are read-only on its instances. Everything else — including what the
normalizer sets, such as ``end`` — goes to the real translator."""

from __future__ import annotations

from typing import Any


class Replaced:
    """``inner`` with the methods named in ``methods`` replaced by the given callables."""

    def __init__(self, inner: Any, **methods: Any) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_methods", methods)

    def __getattr__(self, name: str) -> Any:
        methods = object.__getattribute__(self, "_methods")
        return methods[name] if name in methods else getattr(object.__getattribute__(self, "_inner"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_inner"), name, value)
