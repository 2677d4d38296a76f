"""A real ``reasonwire gateway`` process for tests, and an SSE reader (no mocks)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import ROOT
from reasonwire.workers.services.gateway.keys import hash_key
from reasonwire.workers.ops.settings import WorkerSettings

KEYS = {
    "acme-public": ("acme", ["public"]),
    "acme-internal": ("acme", ["public", "internal"]),
    "globex-key": ("globex", ["public", "internal"]),
}


def key_book(keys: dict[str, tuple[str, list[str]]] = KEYS) -> str:
    return json.dumps({"keys": [{"sha256": hash_key(k), "tenant": t, "audiences": a} for k, (t, a) in keys.items()]})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GatewayProcess:
    def __init__(
        self, settings: WorkerSettings, log: Path, extra_env: dict[str, str] | None = None, command: list[str] | None = None, cwd: Path = ROOT
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
            "REDIS_URL": settings.redis_url,
            "RW_PARTITIONS": str(settings.partitions),
            "RW_GATEWAY_KEYS": key_book(),
            "RW_GATEWAY_KEEPALIVE_S": "1",
            "RW_GATEWAY_FIRST_EVENT_TIMEOUT_S": "8",
            **(extra_env or {}),
        }
        self.log = log
        self._out = log.open("wb")
        cmd = [*(command or [sys.executable, "-m", "reasonwire.workers.cli"]), "gateway", "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._out, stderr=subprocess.STDOUT, cwd=cwd)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"gateway exited: {log.read_text(errors='replace')[-2000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError(f"gateway never answered: {log.read_text(errors='replace')[-2000:]}")

    def health(self) -> dict[str, Any]:
        return httpx.get(self.url + "/healthz", timeout=5).json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._out.close()


@pytest.fixture
def gateway(primed_group: WorkerSettings, tmp_path: Path) -> Iterator[GatewayProcess]:
    process = GatewayProcess(primed_group, tmp_path / "gateway.log")
    yield process
    process.stop()


@dataclass
class SSEStream:
    """What a client saw on one SSE response."""

    status: int
    events: list[dict[str, Any]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    comments: int = 0
    body: dict[str, Any] | None = None


def auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


async def frames(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """(field, value) per SSE line of a response, blank lines as ('', '')."""
    async for line in response.aiter_lines():
        name, _, value = line.partition(":")
        yield name, value.strip()


async def read_sse(client: httpx.AsyncClient, url: str, headers: dict[str, str], *, limit: int | None = None) -> SSEStream:
    async with client.stream("GET", url, headers=headers) as response:
        if response.status_code != 200:
            await response.aread()
            return SSEStream(response.status_code, body=response.json())
        assert response.headers["content-type"].startswith("text/event-stream")
        seen = SSEStream(200)
        async for name, value in frames(response):
            if name == "id":
                seen.ids.append(int(value))
            elif name == "data":
                seen.events.append(json.loads(value))
                if limit is not None and len(seen.events) >= limit:
                    break
            elif name == "" and value:
                seen.comments += 1
        return seen
