"""A poll's Redis writes on a Redis Cluster: one transaction per hash slot, then ``WAIT`` (issue 16).

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

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError, TimeoutError as RedisTimeoutError

log = logging.getLogger("reasonwire.store")


@dataclass(frozen=True)
class Op:
    """One write: a redis-py pipeline method, its key (first argument) and the rest."""

    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return str(self.args[0])


def slot_of(key: str | bytes) -> int:
    return key_slot(key.encode() if isinstance(key, str) else key)


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

    def __init__(self, cluster: RedisCluster, *, wait_replicas: int = 1, wait_timeout_ms: int = 1000) -> None:
        self.cluster = cluster
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.stats = WriteStats()
        self._masters: dict[str, Redis] = {}

    async def write(self, ops: Sequence[Op], *, wait: bool) -> list[Any]:
        """Every op written (one transaction per slot); with ``wait``, ``WAIT`` on every master
        written to. Returns each op's reply, in the order of ``ops``."""
        if not ops and not (wait and self._masters):
            return []
        groups = group_by_slot(ops)
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
            results = await asyncio.gather(*(self._write_master(name, [(s, groups[s]) for s in slots], wait) for name, slots in per_master.items()))
        except (RedisConnectionError, RedisTimeoutError, ResponseError, OSError):
            # a failover: a master is gone or a slot moved; learn the new topology, then the
            # caller retries the poll (its writes are idempotent: SET, HSET, SADD; the index
            # may get a slot twice, which replay reads once)
            await self._refresh()
            raise
        replies: list[Any] = [None] * len(ops)
        for part in results:
            for slot, executed in part:
                for i, reply in zip(positions[slot], executed, strict=True):
                    replies[i] = reply
        return replies

    async def _write_master(self, name: str, groups: list[tuple[int, list[Op]]], wait: bool) -> list[tuple[int, Any]]:
        client = self._client(name)
        pipe = client.pipeline(transaction=False)  # one connection; the MULTI/EXEC are ours
        for _, ops in groups:
            pipe.execute_command("MULTI")
            queue(pipe, ops)
            pipe.execute_command("EXEC")
        if wait and self.wait_replicas > 0:
            pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
        replies = await pipe.execute()
        self.stats.transactions += len(groups)
        out: list[tuple[int, Any]] = []
        index = 0
        for slot, ops in groups:
            index += 1 + len(ops)  # MULTI's OK and one QUEUED per op
            out.append((slot, replies[index]))
            index += 1
        if wait and self.wait_replicas > 0:
            self.stats.waits += 1
            acked = int(replies[-1])
            if acked < self.wait_replicas:
                self.stats.unreplicated += 1
                log.warning("Redis master %s: %d of %d replicas acknowledged within %d ms", name, acked, self.wait_replicas, self.wait_timeout_ms)
        return out

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
