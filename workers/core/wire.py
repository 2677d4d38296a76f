"""Wire encoding of AG-UI events and artefact records: the one place that serializes them.

AG-UI 1.0 wire shape is camelCase with absent optionals omitted (never ``null``);
the generated models already omit unset optionals, and ``by_alias`` gives the
camelCase names.
"""

from __future__ import annotations

from ag_ui.core import BaseEvent
from pydantic import BaseModel


def event_json(event: BaseEvent) -> bytes:
    """One AG-UI event in its exact 1.0 wire shape."""
    return event.model_dump_json(by_alias=True, exclude_none=True).encode()


def record_json(record: BaseModel) -> bytes:
    """One reasonwire contract record (artefact, usage) as JSON, wire names, no nulls."""
    return record.model_dump_json(by_alias=True, exclude_none=True).encode()
