"""Redis key layout (``rw:v1``): artefacts, the thread index, and open-run journals.

Every key of one thread carries the hash tag ``{<tenant>/<thread>}`` so a thread
lives in one Redis Cluster slot and a replay reads it with one slot's commands;
journal keys are tagged by run. Components are percent-encoded so a tenant or
id containing ``{``, ``}``, ``/`` or ``:`` cannot break the tag or collide.

| key | type | holds | TTL |
|---|---|---|---|
| ``rw:v1:{t/th}:art:<slot>`` | string | one :class:`ArtefactRecord` as JSON (value byte-exact) | artefact TTL |
| ``rw:v1:{t/th}:index`` | list | slots of the thread's artefacts, in arrival order | artefact TTL |

A *slot* is ``<entityId>#<position>``: one entity can own several values (two
signed Gemini thought parts in one reasoning message), and each keeps its own
key, so none overwrites another (R4).
| ``rw:v1:{t/th}:runs`` | set | ids of the thread's runs that have (or had) a journal, so an erase finds them | journal TTL |
| ``rw:v1:{t/run}:journal`` | hash | ``<seq>`` → raw provider event of an *open* run (``-1``: its inactivity timeout, in seconds; ``-4``: its envelope) | journal TTL |
| ``rw:v1:{t/run}:ended`` | string | marker ``<partition>:<offset>`` of the run's last raw record: a redelivery up to it is skipped, a later record dead-lettered (``1``: position unknown) | journal TTL |
| ``rw:v1:{open/<p>}:runs`` | set | runs with an open journal whose records are on raw partition ``<p>`` (``["<tenant>","<run>"]``): scanned on assignment and after a worker dropped its runs, so a run whose producer vanished still ends | journal TTL |
| ``rw:v1:{<anchor>}:w:<token>`` | string | a Redis Cluster only: how many polls the worker ``<token>`` wrote to the master whose lowest slot ``<anchor>`` hashes to (the store's rollback witness per shard, docs/reliability.md) | twice the journal TTL |

The journal exists only while a run is open (it is deleted when the run ends);
it is operational state for takeover, not a retained copy of raw events.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final
from urllib.parse import quote

import orjson

PREFIX: Final = "rw:v1"


def _tag(*parts: str) -> str:
    return "{" + "/".join(quote(p, safe="") for p in parts) + "}"


def artefact_slot(entity_id: str, position: int) -> str:
    """Where one value of an entity lives: the entity and the value's position in the turn."""
    return f"{entity_id}#{position}"


@lru_cache(maxsize=65536)
def artefact_key(tenant: str, thread_id: str, slot: str) -> str:
    return f"{PREFIX}:{_tag(tenant, thread_id)}:art:{quote(slot, safe='')}"


@lru_cache(maxsize=65536)
def thread_index_key(tenant: str, thread_id: str) -> str:
    return f"{PREFIX}:{_tag(tenant, thread_id)}:index"


@lru_cache(maxsize=65536)
def thread_runs_key(tenant: str, thread_id: str) -> str:
    return f"{PREFIX}:{_tag(tenant, thread_id)}:runs"


@lru_cache(maxsize=65536)
def journal_key(tenant: str, run_id: str) -> str:
    return f"{PREFIX}:{_tag(tenant, run_id)}:journal"


@lru_cache(maxsize=65536)
def ended_key(tenant: str, run_id: str) -> str:
    return f"{PREFIX}:{_tag(tenant, run_id)}:ended"


@lru_cache(maxsize=4096)
def open_runs_key(partition: int) -> str:
    """The index of open runs whose records are on raw ``partition``: a worker that is assigned the
    partition, or dropped its runs, finds there the runs no record will bring back (a producer
    that vanished) and ends them."""
    return f"{PREFIX}:{_tag('open', str(partition))}:runs"


def open_run_member(tenant: str, run_id: str) -> bytes:
    """A run as a member of :func:`open_runs_key` (JSON, so no id can forge another)."""
    return orjson.dumps([tenant, run_id])


def parse_open_run_member(member: bytes) -> tuple[str, str] | None:
    try:
        tenant, run_id = orjson.loads(member)
    except (ValueError, TypeError):
        return None
    return (tenant, run_id) if isinstance(tenant, str) and isinstance(run_id, str) else None


def shard_count_key(anchor_tag: str, token: str) -> str:
    """A worker's write counter on one Redis Cluster master: ``anchor_tag`` is a hash tag of the
    master's lowest slot (``reasonwire.workers.io.redis_slots.slot_tag``), ``token`` the worker's name."""
    return f"{PREFIX}:{{{anchor_tag}}}:w:{quote(token, safe='')}"
