"""Wire encoding of AG-UI events and contract records: the one place that serializes them.

AG-UI 1.0 wire shape is camelCase with absent optionals omitted (never ``null``):
exactly ``model_dump_json(by_alias=True, exclude_none=True)``. The core already
emits events as wire dicts (``reasonwire.workers.core.events``), so encoding one is a
single ``orjson.dumps``. An ``ag_ui.core`` model (a library caller's) goes
through ag_ui's omit-null wrap serializer if dumped by pydantic, which calls back
into Python for every model; this module walks its fields with cached aliases
instead. Our own contract records have no such serializer and use pydantic-core's
directly. ``tests/unit/test_wire.py`` checks the bytes are identical to
pydantic's on every output of every fixture.
"""

from __future__ import annotations

from typing import Any

import orjson
from ag_ui.core import BaseEvent
from pydantic import BaseModel

from reasonwire.workers.core.events import WireEvent

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


def event_json(event: WireEvent | BaseEvent) -> bytes:
    """One AG-UI event in its exact 1.0 wire shape."""
    if type(event) is dict:
        return orjson.dumps(event)
    return orjson.dumps(_plain(event))


def record_json(record: BaseModel) -> bytes:
    """One reasonwire contract record (artefact, usage) as JSON, wire names, no nulls."""
    return record.__pydantic_serializer__.to_json(record, by_alias=True, exclude_none=True)
