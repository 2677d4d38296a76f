"""Where a replay's artefacts come from: the thread's Redis records, or a file written offline.

Adapters, not core: the core takes records however they were read. Redis keys are
tenant-namespaced (``reasonwire.contracts.store``), so reading ``(tenant, thread)`` can only
ever return that tenant's records — a replay cannot cross tenants by construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from reasonwire.contracts.artefacts import ArtefactRecord

if TYPE_CHECKING:  # the offline path needs no Redis client
    from reasonwire.workers.io.store import ArtefactStore


class ArtefactFileError(ValueError):
    """An artefact file line that is not a ``reasonwire.artefact.v1`` record (named by line, never shown)."""


def read_artefact_lines(lines: Iterable[str], *, source: str = "artefacts") -> list[ArtefactRecord]:
    """Records from JSONL (what ``reasonwire translate --artefacts`` writes), in file order."""
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(ArtefactRecord.model_validate_json(line))
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"]) or "record"
            raise ArtefactFileError(f"{source} line {number} is not an artefact record ({where}: {error['msg']})") from None
    return records


def read_artefact_file(path: str | Path) -> list[ArtefactRecord]:
    with open(path, encoding="utf-8") as lines:
        return read_artefact_lines(lines, source=str(path))


async def read_thread(store: ArtefactStore, tenant: str, thread_id: str) -> list[ArtefactRecord]:
    """The thread's records of ``tenant`` only, in arrival order."""
    return await store.thread_artefacts(tenant, thread_id)
