"""Wire encoding of AG-UI events and artefact records: the one place that serializes them.

AG-UI 1.0 wire shape is camelCase with absent optionals omitted (never ``null``):
exactly ``model_dump_json(by_alias=True, exclude_none=True)``. That call goes
through ag_ui's omit-null wrap serializer, which calls back into Python for every
model and was a quarter of the translator's CPU (docs/benchmarks.md); this module
walks the model fields with cached aliases and hands plain values to orjson
instead. ``tests/unit/test_wire.py`` checks the bytes are identical to pydantic's
on every output of every fixture.
"""

from __future__ import annotations

from typing import Any

import orjson
from ag_ui.core import BaseEvent
from pydantic import BaseModel

_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {}


def _fields(cls: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = tuple((n, f.serialization_alias or f.alias or n) for n, f in cls.model_fields.items())
        _FIELDS[cls] = names
    return names


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        out = {}
        for name, alias in _fields(type(value)):
            v = getattr(value, name)
            if v is not None:
                out[alias] = _plain(v)
        extra = value.__pydantic_extra__
        if extra:
            for k, v in extra.items():
                if v is not None:
                    out[k] = _plain(v)
        return out
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def event_json(event: BaseEvent) -> bytes:
    """One AG-UI event in its exact 1.0 wire shape."""
    return orjson.dumps(_plain(event))


def record_json(record: BaseModel) -> bytes:
    """One reasonwire contract record (artefact, usage) as JSON, wire names, no nulls."""
    return orjson.dumps(_plain(record))
