"""A poll's Redis writes on a Redis Cluster: one transaction per hash slot, then ``WAIT``.

On one server the store writes a whole poll in one ``MULTI``/``EXEC``. On a cluster a
transaction may touch one hash slot only, and every key of a thread (or of a run's journal)
carries one hash tag (:mod:`reasonwire.contracts.store`), so the poll's writes are grouped per slot —
in poll order within each slot — and each slot's group is one ``MULTI``/``EXEC``.

The groups of the slots one master serves go to it in one pipeline on one connection:
``MULTI … EXEC`` per slot, then, when the poll ends a run, ``WAIT <replicas> <timeout>`` —
on every master this writer has written to, since the run's artefacts may have been
written by earlier polls. ``WAIT`` counts the replicas that have every write this
connection made, so every write must go on the connection that later waits — which is
why this module talks to each master through its own one-connection client rather than
through ``RedisCluster``'s pool, where the next command may take another connection. ``RedisCluster`` still owns the topology: which master serves
a slot, refreshed after a failover (a ``MOVED``, a refused connection), and every read.

Fences on a cluster. A slot holding a fenced run's journal is written by the store's write
script (:data:`reasonwire.workers.io.redis_script.WRITE_OPS`, one ``EVALSHA`` per slot: a run's
journal and ended marker share its hash tag) instead of ``MULTI``/``EXEC``: the run's head and
ended marker are checked and the slot's writes made in one atomic step, or nothing of that slot
is written and the script names the runs that moved. And each master's pipeline ends with an
``INCR`` of the writer's own counter key on that master (in the master's *anchor* slot, its
lowest): the replication stream, an AOF and a snapshot are prefixes of the master's history,
so a copy of the shard whose counter is at ``n`` has every write made before the ``n``-th
increment — a counter below what the writer saw acknowledged is a shard that went back
(a lagging replica promoted, a restored copy; ``workers/core/fence.py``).

The store publishes a run's terminal event only after this returns, so an artefact the
client was told about is on a replica as well as on its master: a master killed right
after is replaced by a replica that has it. A ``WAIT`` that times out (the replica is down
or lagging) is counted and logged, not retried: blocking a partition until a replica
returns would stop the stream — the reply says how many replicas acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from functools import lru_cache

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from reasonwire.contracts.store import shard_count_key
from reasonwire.workers.io.redis_script import WRITE_OPS, WRITE_OPS_SHA, Op as Op, write_call
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError, TimeoutError as RedisTimeoutError

log = logging.getLogger("reasonwire.store")


def slot_of(key: str | bytes) -> int:
    return key_slot(key.encode() if isinstance(key, str) else key)


@lru_cache(maxsize=1024)
def slot_tag(slot: int) -> str:
    """A hash tag that hashes to ``slot`` (the first ``w<i>`` that does): where a master's
    counter key lives. Deterministic, so every worker and every start finds the same key."""
    if not 0 <= slot < REDIS_CLUSTER_HASH_SLOTS:
        raise ValueError(f"no hash slot {slot}")
    i = 0
    while key_slot(f"w{i}".encode()) != slot:
        i += 1
    return f"w{i}"


@dataclass(frozen=True)
class Fence:
    """A run's fence: its journal and ended keys (one hash tag: one slot), the head
    the writer expects and the head it writes (``workers/core/fence.py``)."""

    journal: str
    ended: str
    expected: str
    new: str


@dataclass
class SlotWrite:
    """What :meth:`SlotWriter.write_guarded` got back."""

    replies: list[Any]
    """Each op's reply, in the order of the ops (``None`` for ops written by the fence script)."""
    moved: list[int] = field(default_factory=list)
    """Indices of the fences refused (nothing of their slots was written)."""
    counts: dict[int, int] = field(default_factory=dict)
    """Per master written to (its anchor slot): the writer's counter there after this write."""


def group_by_slot(ops: Iterable[Op]) -> dict[int, list[Op]]:
    """Ops per hash slot, slots in order of first appearance, ops in their order within a slot.

    Only single-key ops are grouped; a multi-key op must name keys of one slot (a ``DEL`` of
    a thread's keys), and one that does not is refused here rather than by the cluster."""
    groups: dict[int, list[Op]] = {}
    for op in ops:
        slot = slot_of(op.key)
        if op.method == "delete":
            others = {slot_of(k) for k in op.args}
            if others != {slot}:
                raise ValueError(f"a {op.method} spans {len(others)} hash slots")
        groups.setdefault(slot, []).append(op)
    return groups


def queue(pipe: Any, ops: Iterable[Op]) -> None:
    """Append the ops to a redis-py pipeline, in order."""
    for op in ops:
        getattr(pipe, op.method)(*op.args, **op.kwargs)


@dataclass
class WriteStats:
    transactions: int = 0
    waits: int = 0
    unreplicated: int = 0
    """``WAIT`` calls that returned fewer replicas than asked within the timeout."""


class SlotWriter:
    """Writes a poll's ops to a cluster: per master one pipeline of per-slot transactions (+ WAIT)."""

    def __init__(
        self, cluster: RedisCluster, *, wait_replicas: int = 1, wait_timeout_ms: int = 1000, token: str = "", count_ttl_s: int = 0
    ) -> None:
        self.cluster = cluster
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.token = token
        """This writer's name in its per-master counter keys (``write_guarded(count=True)``)."""
        self.count_ttl_s = count_ttl_s
        """TTL of the counter keys, refreshed by every increment (0: none)."""
        self.stats = WriteStats()
        self._masters: dict[str, Redis] = {}
        self._scripted: set[str] = set()
        """Masters whose connection loaded the fence script (loaded again after a refresh)."""
        self._anchors: tuple[int, dict[str, int]] = (0, {})
        """(id of the topology it was computed from, master name → its lowest slot)."""

    async def write(self, ops: Sequence[Op], *, wait: bool) -> list[Any]:
        """Every op written (one transaction per slot); with ``wait``, ``WAIT`` on every master
        written to. Returns each op's reply, in the order of ``ops``."""
        return (await self.write_guarded(ops, wait=wait)).replies

    async def write_guarded(
        self, ops: Sequence[Op], *, wait: bool, fences: Sequence[Fence] = (), count: bool = False, journal_ttl_s: int = 0
    ) -> SlotWrite:
        """:meth:`write`, with the runs' fences: a slot holding a fence's journal is written
        by the fence script (nothing of that slot lands when one of its fences fails: the fence's
        index is in :attr:`SlotWrite.moved`), and with ``count`` each master's writes are followed
        by an increment of this writer's counter there (:attr:`SlotWrite.counts`)."""
        if not ops and not fences and not (wait and self._masters):
            return SlotWrite([])
        groups = group_by_slot(ops)
        fenced: dict[int, list[tuple[int, Fence]]] = {}
        for i, fence in enumerate(fences):
            fenced.setdefault(slot_of(fence.journal), []).append((i, fence))
        for slot in fenced:
            groups.setdefault(slot, [])
        positions: dict[int, list[int]] = {}
        for i, op in enumerate(ops):
            positions.setdefault(slot_of(op.key), []).append(i)
        await self._ready()
        per_master: dict[str, list[int]] = {}
        for slot in groups:
            node = self.cluster.nodes_manager.get_node_from_slot(slot)
            per_master.setdefault(node.name, []).append(slot)
        if wait:  # earlier polls' writes to other masters: their terminal event waits for them too
            for name in self._masters:
                per_master.setdefault(name, [])
        try:
            results = await asyncio.gather(
                *(
                    self._write_master(name, [(s, groups[s], fenced.get(s, [])) for s in slots], wait, count, journal_ttl_s)
                    for name, slots in per_master.items()
                )
            )
        except (RedisConnectionError, RedisTimeoutError, ResponseError, OSError):
            # a failover: a master is gone or a slot moved; learn the new topology, then the
            # caller retries the poll (its writes are idempotent: SET, HSET, SADD; the index
            # may get a slot twice, which replay reads once)
            await self._refresh()
            raise
        out = SlotWrite([None] * len(ops))
        for part, moved, counted in results:
            for slot, executed in part:
                if executed is None:  # written by the fence script: no per-op replies
                    continue
                for i, reply in zip(positions.get(slot, []), executed, strict=True):
                    out.replies[i] = reply
            out.moved += moved
            out.counts.update(counted)
        out.moved.sort()
        return out

    def count_key(self, slot: int) -> tuple[int, str]:
        """(anchor slot, this writer's counter key) of the master serving ``slot`` now."""
        anchor = self._anchor(self.cluster.nodes_manager.get_node_from_slot(slot).name)
        return anchor, shard_count_key(slot_tag(anchor), self.token)

    def _anchor(self, name: str) -> int:
        """The lowest slot master ``name`` serves (the topology as the cluster client knows it)."""
        cache = self.cluster.nodes_manager.slots_cache
        if self._anchors[0] != id(cache):
            lowest: dict[str, int] = {}
            for slot, nodes in cache.items():
                if nodes and slot < lowest.get(nodes[0].name, REDIS_CLUSTER_HASH_SLOTS):
                    lowest[nodes[0].name] = slot
            self._anchors = (id(cache), lowest)
        return self._anchors[1][name]

    async def _write_master(
        self, name: str, groups: list[tuple[int, list[Op], list[tuple[int, Fence]]]], wait: bool, count: bool, journal_ttl_s: int
    ) -> tuple[list[tuple[int, Any]], list[int], dict[int, int]]:
        client = self._client(name)
        pipe = client.pipeline(transaction=False)  # one connection; the MULTI/EXEC are ours
        loading = any(f for _, _, f in groups) and name not in self._scripted
        if loading:  # once per connection: the EVALSHAs below find it
            pipe.execute_command("SCRIPT", "LOAD", WRITE_OPS)
        for _, ops, fences in groups:
            if fences:  # the run's head and ended marker checked, the slot written, in one step
                guards = [(f.journal, f.ended, f.expected, f.new) for _, f in fences]
                keys, args = write_call(ops, fences[0][1].journal, None, fences=guards, journal_ttl_s=journal_ttl_s)
                pipe.execute_command("EVALSHA", WRITE_OPS_SHA, len(keys), *keys, *args)
            else:
                pipe.execute_command("MULTI")
                queue(pipe, ops)
                pipe.execute_command("EXEC")
        counted = count and bool(groups)
        anchor = self._anchor(name) if counted else -1
        if counted:  # after the writes, on the same connection: a copy with this count has them
            key = shard_count_key(slot_tag(anchor), self.token)
            pipe.execute_command("INCR", key)
            if self.count_ttl_s:
                pipe.execute_command("EXPIRE", key, self.count_ttl_s)
        if wait and self.wait_replicas > 0:
            pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
        replies = await pipe.execute()
        if loading:
            self._scripted.add(name)
        self.stats.transactions += len(groups)
        out: list[tuple[int, Any]] = []
        moved: list[int] = []
        index = 1 if loading else 0
        for slot, ops, fences in groups:
            if fences:
                reply = replies[index]
                if reply[0] == 2:
                    moved += [fences[int(i) - 1][0] for i in reply[1:]]
                out.append((slot, None))
                index += 1
                continue
            index += 1 + len(ops)  # MULTI's OK and one QUEUED per op
            out.append((slot, replies[index]))
            index += 1
        counts = {anchor: int(replies[index])} if counted else {}
        if wait and self.wait_replicas > 0:
            self.stats.waits += 1
            acked = int(replies[-1])
            if acked < self.wait_replicas:
                self.stats.unreplicated += 1
                log.warning("Redis master %s: %d of %d replicas acknowledged within %d ms", name, acked, self.wait_replicas, self.wait_timeout_ms)
        return out, moved, counts

    def _client(self, name: str) -> Redis:
        client = self._masters.get(name)
        if client is None:
            node = self.cluster.nodes_manager.nodes_cache[name]
            kwargs = {k: v for k, v in node.connection_kwargs.items() if k not in ("host", "port")}
            options = _plain_kwargs(kwargs)
            if "SSL" in node.connection_class.__name__:
                options["ssl"] = True
            # one connection per master: WAIT covers every write this writer made to it, in order
            pool = BlockingConnectionPool(host=node.host, port=node.port, max_connections=1, timeout=None, **options)
            client = self._masters[name] = Redis(connection_pool=pool)
        return client

    async def _ready(self) -> None:
        if not self.cluster.nodes_manager.slots_cache:
            await self.cluster.initialize()

    async def _refresh(self) -> None:
        clients, self._masters = self._masters, {}
        self._scripted = set()
        for client in clients.values():
            await client.aclose()
        try:
            await self.cluster.nodes_manager.initialize()
        except Exception:  # every node unreachable right now: the next write tries again
            log.debug("Redis Cluster topology refresh failed", exc_info=True)

    async def aclose(self) -> None:
        for client in self._masters.values():
            await client.aclose()
        self._masters = {}


_REDIS_KWARGS = frozenset(
    {
        "username", "password", "db", "socket_timeout", "socket_connect_timeout", "socket_keepalive", "socket_keepalive_options",
        "retry_on_timeout", "encoding", "encoding_errors", "decode_responses", "ssl", "ssl_keyfile", "ssl_certfile",
        "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_data", "ssl_check_hostname", "ssl_min_version", "client_name", "health_check_interval",
    }
)  # fmt: skip


def _plain_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The cluster node's connection options a plain ``Redis`` takes (credentials, TLS, timeouts)."""
    return {k: v for k, v in kwargs.items() if k in _REDIS_KWARGS}
