"""The gateway's shutdown is bounded (found by `make test`: after Ctrl-C, `make run`'s gateway
sometimes waited over 60 s in its lifespan shutdown): each client gets a few seconds to close,
then the shutdown goes on and the process exits."""

from __future__ import annotations

import asyncio
import time

import pytest

from reasonwire.workers.services.gateway import app


async def test_a_client_whose_close_hangs_does_not_hold_the_shutdown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "SHUTDOWN_STEP_S", 0.2)
    never = asyncio.Event()

    async def hangs() -> None:
        try:
            await never.wait()
        except asyncio.CancelledError:
            await never.wait()  # swallows the cancellation, as a stuck client close can

    start = time.monotonic()
    await app._bounded("stuck client", hangs())
    assert time.monotonic() - start < 1.0
    never.set()  # the abandoned close ends (in the gateway it dies with the process)
    await asyncio.sleep(0)


async def test_a_failing_close_is_reported_not_raised() -> None:
    async def fails() -> None:
        raise RuntimeError("connection reset")

    await app._bounded("client", fails())
