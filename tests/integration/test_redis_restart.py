"""After Redis restarts, the store's first writes go through on every pooled connection.

``make chaos`` row "/readyz after Redis is back": redis-py 8.1's asyncio pool
handed out, unchecked, the connections that sat idle in it while Redis restarted (its check is
skipped when maintenance notifications are on, and they are by default on RESP3). redis-py's
own commands retry such a connection unseen; the store's scripts do not (by design), so the
first poll after the store probe failed, and the worker waited a whole backoff step more.
A private real Redis (its own port and dir), restarted by the test; no Kafka needed.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from reasonwire.workers.io.redis_connect import connect
from reasonwire.workers.io.store import ArtefactStore
from tests.integration.test_backoff_and_health import PrivateRedis

pytestmark = pytest.mark.integration

CONNECTIONS = 4
"""Writes in flight at once before the restart: the worker's polls, journal reads and probe
each take a connection of the pool."""


async def test_store_writes_on_every_pooled_connection_after_a_redis_restart(tmp_path: Path) -> None:
    """``make chaos`` row "/readyz after Redis is back": no write fails on a connection the
    restarted server had closed (each such failure cost the worker one more backoff step)."""
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server on PATH (deploy/services.sh installs it)")
    redis = PrivateRedis(tmp_path)
    redis.start()
    client = connect(f"redis://127.0.0.1:{redis.port}/0")
    store = ArtefactStore(client, artefact_ttl_s=60, journal_ttl_s=60)
    try:
        await store.claim_epoch(lost=False)
        await asyncio.gather(*(store.probe() for _ in range(CONNECTIONS)))
        pooled = len(client.connection_pool._available_connections)  # noqa: SLF001
        assert pooled >= 2, "the test needs idle connections in the pool across the restart"
        redis.stop()
        await asyncio.sleep(0.5)  # the loop reads each idle connection's end of stream, as a worker's does
        redis.start()
        results = await asyncio.gather(*(store.probe() for _ in range(CONNECTIONS)), return_exceptions=True)
    finally:
        await client.aclose()
        redis.stop()
    failed = [type(r).__name__ for r in results if isinstance(r, BaseException)]
    assert not failed, f"writes failed on connections the restarted server had closed: {failed} (of {pooled} pooled)"
