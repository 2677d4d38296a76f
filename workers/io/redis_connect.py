"""One way to open Redis for every component: a single server or a Redis Cluster.

``REDIS_URL`` as redis-py reads it (``redis://``, ``rediss://`` for TLS, ``user:password@``
for an ACL user, ``?ssl_ca_certs=…`` and the other connection options), or a cluster:

* ``redis-cluster://host1:port1,host2:port2/0`` (``rediss-cluster://`` with TLS): every
  listed node is a start-up node, so the client starts while one of them is down;
* or any ``redis://`` URL with ``RW_REDIS_CLUSTER=1``.

Cluster mode uses redis-py's ``RedisCluster``; the store then groups each poll's writes
per hash slot (:mod:`reasonwire.workers.io.redis_slots`).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import parse_url

# a cluster URL's format is part of REDIS_URL's validation; named here too, beside the client
from reasonwire.workers.ops.settings import CLUSTER_SCHEMES, RedisWaitSettings, cluster_nodes as cluster_nodes

_TRUE = {"1", "true", "yes", "on"}


def wants_cluster(url: str, env: Mapping[str, str] | None = None) -> bool:
    """A ``redis-cluster://`` URL, or ``RW_REDIS_CLUSTER`` (:class:`~reasonwire.workers.ops.settings.RedisSettings`) set."""
    env = os.environ if env is None else env
    return urlsplit(url).scheme in CLUSTER_SCHEMES or (env.get("RW_REDIS_CLUSTER") or "").strip().lower() in _TRUE


def connect(url: str, env: Mapping[str, str] | None = None, **kwargs: Any) -> Redis | RedisCluster:
    """A client for ``url``: ``RedisCluster`` when :func:`wants_cluster`, else ``Redis``
    (whose pool replaces the connections a restarted server closed: :func:`_pool_checks_connections`)."""
    if not wants_cluster(url, env):
        return Redis.from_url(url, **_pool_checks_connections(kwargs))
    plain, nodes = cluster_nodes(url)
    options = {**parse_url(plain), **kwargs}
    options.pop("host", None)
    options.pop("port", None)
    if options.pop("db", 0) not in (0, "0"):
        raise ValueError("REDIS_URL: a Redis Cluster has only database 0")
    options.pop("connection_class", None)
    if plain.startswith("rediss:"):
        options["ssl"] = True
    return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes], **options)


def _pool_checks_connections(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with redis-py's maintenance notifications off, unless the caller chose.

    Why: redis-py 8.1's asyncio pool hands out a connection without checking it when these
    notifications are enabled — and they are, as ``"auto"``, on every RESP3 TCP client (RESP3
    is 8.x's default), also on a server that does not support them. So each connection left idle
    in the pool while Redis restarted comes back closed: redis-py's own commands retry it
    unseen, but the store's scripts (:mod:`reasonwire.workers.io.redis_script`: no client-side
    retry, by design) fail their poll, and each such failure cost the worker a whole backoff
    step after Redis was back (``/readyz`` 200 after 7.5–8.9 s instead of within one step;
    ``make chaos`` "/readyz after Redis is back"). Off, the pool checks each connection before
    handing it out and reconnects one the server closed. The notifications serve planned
    maintenance of Redis Enterprise / Cloud (relaxed timeouts, early reconnects); the worker's
    backoff covers such a failover. redis-py's fix (pull request 4260) is not released as of
    8.1.0; redis-py before 8.1 has no such option and checks its connections."""
    if "maint_notifications_config" in kwargs or "maint_notifications_config" not in _REDIS_OPTIONS:
        return kwargs
    from redis.maint_notifications import MaintNotificationsConfig

    return {**kwargs, "maint_notifications_config": MaintNotificationsConfig(enabled=False)}


_REDIS_OPTIONS = frozenset(inspect.signature(Redis.__init__).parameters)


def redis_wait(env: Mapping[str, str] | None = None) -> dict[str, int]:
    """The store's ``WAIT`` on a cluster: ``RW_REDIS_WAIT_REPLICAS`` (default 1; 0 turns it off)
    replicas must acknowledge a batch that ends a run, within ``RW_REDIS_WAIT_TIMEOUT_MS``
    (default 1000) — past that the terminal event goes out anyway and the worker logs it.
    Read through :class:`~reasonwire.workers.ops.settings.RedisWaitSettings` (a bad value: one line naming it)."""
    wait = RedisWaitSettings.from_env(env)
    return {"wait_replicas": wait.redis_wait_replicas, "wait_timeout_ms": wait.redis_wait_timeout_ms}


def is_cluster(redis: Any) -> bool:
    return isinstance(redis, RedisCluster)
