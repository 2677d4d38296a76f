"""A poll's writes (and its journal reads) on one Redis server as one script call each, the epoch checked first.

On one server :class:`reasonwire.workers.io.store.ArtefactStore` writes a poll (artefacts, thread index,
journal entries) and later its ended markers. It did so as a redis-py ``MULTI``/``EXEC``
pipeline, whose cost on the worker's thread grows per command: redis-py's asyncio
connection packs every argument in Python and parses a ``QUEUED`` reply per command —
about 50 µs of the worker's CPU per command on the development machine, 6 ms for a poll
that touches 80 runs (``python -m bench.redis_write``). This module sends the same writes
as one ``EVALSHA``:

* atomic like the transaction (a script runs alone on the server), one reply;
* the store's epoch is compared *before* anything is written, so a wiped store receives
  nothing of a batch it will refuse (the transaction could only read the epoch beside
  its writes, which then landed in the emptied store);
* arguments packed by hiredis (C), sent on a connection of the client's own pool — TLS,
  ACL users, the database and the timeouts of ``REDIS_URL`` apply unchanged.

Where this steps past redis-py's client: no client-side retry (a failed write fails the
poll, which the worker rewinds and redoes after its backoff — a retry here could apply a
script twice whose reply was lost) and no per-command reply callbacks (the script's only
reply is a status: see :data:`WRITE_OPS`).

The write script is also the fence (``workers/core/fence.py``): before anything is
written it checks each written run's journal head and ended marker, and the store's write count
against the witness; it writes all of a poll or nothing. On a Redis Cluster a script may only
touch one slot: there a slot holding fenced runs' journals is written by this same script with
the epoch unchecked (a run's journal and ended marker share its hash tag), the other slots by the
per-slot transactions of :mod:`reasonwire.workers.io.redis_slots`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import hiredis
from redis.asyncio import Redis
from redis.exceptions import NoScriptError


@dataclass(frozen=True)
class Op:
    """One write: a redis-py pipeline method, its key (first argument) and the rest."""

    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return str(self.args[0])


EPOCH_RULE = """
local function epoch_refused(key, expected, witness)
  if expected == '' then return false end
  if redis.call('HGET', key, 'id') ~= expected then return true end
  return witness ~= '' and tonumber(redis.call('HGET', key, 'w') or '0') < tonumber(witness)
end
"""
"""The store's epoch check in Lua, once, for every script that makes it (:data:`WRITE_OPS`,
:data:`READ_HASHES` and the epoch claim of :mod:`reasonwire.workers.io.store`): the rule of
:func:`~reasonwire.workers.core.fence.epoch_refused` — the epoch hash ``key``'s id is not the one
``expected`` ('' = unchecked), or its write count ``w`` is below ``witness`` ('' = unchecked)."""

_EPOCH_FIRST = EPOCH_RULE + """if epoch_refused(KEYS[1], ARGV[1], ARGV[2]) then return 0 end
"""
"""Both store scripts start here: KEYS[1] is the epoch hash, ARGV[1] the id expected ('' = unchecked),
ARGV[2] the lowest write count the store may have (the witness, ``workers/core/fence.py``; '' =
unchecked, and always so when ARGV[1] is): a store whose id changed, or whose count went back (a
restored copy), is refused."""

HEAD_FIELD = "-3"
"""The journal hash's field holding the run's head (``<writes>.<worker token>``): a negative
``rw-seq``, so the journal's readers take it for bookkeeping, not input."""

WRITE_OPS = _EPOCH_FIRST + """local f = tonumber(ARGV[3])
local moved = {}
for i = 1, f do
  local head = redis.call('HGET', KEYS[2 * i], '""" + HEAD_FIELD + """') or ''
  if redis.call('EXISTS', KEYS[2 * i + 1]) == 1 or (head ~= ARGV[3 + 2 * i] and head ~= ARGV[4 + 2 * i]) then
    moved[#moved + 1] = i
  end
end
if #moved > 0 then
  table.insert(moved, 1, 2)
  return moved
end
for i = 1, f do
  redis.call('HSET', KEYS[2 * i], '""" + HEAD_FIELD + """', ARGV[4 + 2 * i])
  redis.call('EXPIRE', KEYS[2 * i], ARGV[4])
end
local a = 5 + 2 * f
for k = 2 + 2 * f, #KEYS do
  local n = tonumber(ARGV[a + 1])
  redis.call(ARGV[a], KEYS[k], unpack(ARGV, a + 2, a + 1 + n))
  a = a + 2 + n
end
local w = 0
if ARGV[1] ~= '' then w = redis.call('HINCRBY', KEYS[1], 'w', 1) end
return {1, w}
"""
"""KEYS[1]: the epoch hash; KEYS[2i], KEYS[2i+1] (i = 1..F): fence i's journal and ended marker;
then op k's key. ARGV[1], ARGV[2]: as in :data:`_EPOCH_FIRST`; ARGV[3]: F; ARGV[4]: the journal
TTL; ARGV[3+2i], ARGV[4+2i]: fence i's head expected and head written; then per op its command,
its argument count and the arguments after the key.

Returns 0 (nothing written) when the epoch's id is missing or another, or its write count is
below the witness; ``{2, i…}`` (nothing written) when fence i failed — the run has ended, or its
head is neither the one expected nor the one this write sets (another worker wrote for the run
since); else ``{1, w}``, ``w`` the store's write count after this call (0 when unchecked)."""

WRITE_OPS_SHA = hashlib.sha1(WRITE_OPS.encode()).hexdigest()
"""What ``EVALSHA`` calls it (a Redis Cluster's per-slot fence writes, :mod:`reasonwire.workers.io.redis_slots`)."""

READ_HASHES = _EPOCH_FIRST + """local out = {}
for k = 2, #KEYS, 2 do
  out[#out + 1] = redis.call('HGETALL', KEYS[k])
  out[#out + 1] = redis.call('GET', KEYS[k + 1])
end
return out
"""
"""KEYS[1]: the epoch hash; then pairs (a hash, a string): for each its ``HGETALL`` (flat
field, value list) and its ``GET`` (nil when missing). ARGV[1], ARGV[2] as in :data:`WRITE_OPS`;
returns 0 instead when the store is refused. One server, one reply: the journal reads of a
poll's new runs."""

MAX_FIELDS_PER_CALL = 1000
"""An ``HSET`` of more fields is split: Lua's ``unpack`` is bounded by its C stack (8000)."""


_COMMANDS = {"set": "SET", "rpush": "RPUSH", "expire": "EXPIRE", "hset": "HSET", "sadd": "SADD", "srem": "SREM", "delete": "DEL"}
"""redis-py's method → the Redis command (``delete`` is ``DEL``)."""


class ScriptError(ValueError):
    """An op this module cannot express (a programming error, not a Redis failure)."""


def op_words(ops: Sequence[Op]) -> tuple[list[str], list[Any]]:
    """Each op's key and its command words after the key, flattened for :data:`WRITE_OPS`."""
    keys: list[str] = []
    words: list[Any] = []
    for op in ops:
        for rest in _rest(op):
            keys.append(op.args[0])
            words.append(_COMMANDS[op.method])
            words.append(len(rest))
            words.extend(rest)
    return keys, words


def _rest(op: Op) -> list[list[Any]]:
    """The words after the key, one list per command (a big ``HSET`` becomes several)."""
    if op.method == "hset" and set(op.kwargs) == {"mapping"} and len(op.args) == 1:
        items = [word for pair in op.kwargs["mapping"].items() for word in pair]
        step = 2 * MAX_FIELDS_PER_CALL
        return [items[i : i + step] for i in range(0, len(items), step)]
    if op.method == "set" and set(op.kwargs) <= {"ex"}:
        return [[*op.args[1:], *(("EX", op.kwargs["ex"]) if "ex" in op.kwargs else ())]]
    if op.method in ("expire", "rpush", "sadd", "srem", "delete") and not op.kwargs and (op.method != "delete" or len(op.args) == 1):
        return [list(op.args[1:])]
    raise ScriptError(f"no script form for {op.method}{op.args[:1]} {sorted(op.kwargs)}")


class ServerScript:
    """One Lua script on one server, called by ``EVALSHA`` and loaded on first use (or after the
    server forgot it: scripts are not persisted)."""

    def __init__(self, redis: Redis, source: str) -> None:
        self.redis = redis
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def pack(self, keys: Sequence[Any], args: Sequence[Any]) -> bytes:
        """The ``EVALSHA`` command, in RESP."""
        return bytes(hiredis.pack_command(("EVALSHA", self.sha, len(keys), *keys, *args)))

    async def __call__(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        packed = self.pack(keys, args)
        try:
            return await self._send(packed)
        except NoScriptError:  # a fresh, restarted or flushed server: load it once, send again
            await self.redis.script_load(self.source)
            return await self._send(packed)

    async def _send(self, packed: bytes) -> Any:
        pool = self.redis.connection_pool
        connection = await pool.get_connection()
        try:
            await connection.send_packed_command(packed)
            return await connection.read_response()
        except BaseException:
            await connection.disconnect()  # a reply may still be on the wire: never reuse it
            raise
        finally:
            await pool.release(connection)


def write_call(
    ops: Sequence[Op], epoch_key: str, epoch: str | None, *, witness: int | None = None,
    fences: Sequence[tuple[str, str, str, str]] = (), journal_ttl_s: int = 0,
) -> tuple[list[str], list[Any]]:
    """The keys and arguments of :data:`WRITE_OPS` for ``ops``, guarded by ``fences``
    (journal key, ended key, head expected, head written) and the ``witness`` count."""
    keys, words = op_words(ops)
    fence_keys = [key for journal, ended, _, _ in fences for key in (journal, ended)]
    fence_args = [head for _, _, expected, new in fences for head in (expected, new)]
    return [epoch_key, *fence_keys, *keys], [epoch or "", _witness_arg(epoch, witness), len(fences), journal_ttl_s, *fence_args, *words]


def _witness_arg(epoch: str | None, witness: int | None) -> str | int:
    return witness if epoch is not None and witness else ""


def read_call(pairs: Sequence[tuple[str, str]], epoch_key: str, epoch: str | None, *, witness: int | None = None) -> tuple[list[str], list[Any]]:
    """The keys and arguments of :data:`READ_HASHES` for (hash, string) key pairs."""
    return [epoch_key, *(key for pair in pairs for key in pair)], [epoch or "", _witness_arg(epoch, witness)]
