"""``connect()`` gives a single-server client whose pool checks a connection before handing it
out (``make chaos`` row "/readyz after Redis is back"; the behaviour on a real restarted Redis is
tests/integration/test_redis_restart.py). No server needed: nothing here connects."""

from __future__ import annotations

import pytest

from reasonwire.workers.io.redis_connect import connect

pytest.importorskip("redis.maint_notifications")


async def test_connect_turns_maintenance_notifications_off_so_the_pool_checks_connections() -> None:
    client = connect("redis://127.0.0.1:1/0")
    try:
        assert not client.connection_pool.maint_notifications_enabled()
    finally:
        await client.aclose()


async def test_a_callers_own_maintenance_notifications_choice_is_kept() -> None:
    from redis.maint_notifications import MaintNotificationsConfig

    client = connect("redis://127.0.0.1:1/0", maint_notifications_config=MaintNotificationsConfig(enabled="auto"))
    try:
        assert client.connection_pool.maint_notifications_enabled()
    finally:
        await client.aclose()
