"""A worker's probe address (docs/reliability.md, "/healthz, /readyz, metrics"): ``RW_HEALTH_HOST``
chooses where they listen, and an address that cannot be bound stops the worker with the
gateway's one line, exit 2 — never a worker running without ``/readyz`` and ``/metrics``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from tests.integration.conftest import ROOT

pytestmark = pytest.mark.integration


def _env(settings: Any, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
        "REDIS_URL": settings.redis_url,
        "RW_GROUP_ID": settings.group_id,
        "RW_REPLAY_GROUP_ID": settings.group_id + "-replay",
        **extra,
    }


@pytest.mark.parametrize("kind", ["normalize", "replay"])
def test_a_taken_health_port_stops_the_worker_with_one_line_and_exit_2(kind: str, primed_group: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "reasonwire.workers.cli", "worker", kind],
            env=_env(primed_group, RW_HEALTH_HOST="127.0.0.1", RW_HEALTH_PORT=str(port)), capture_output=True, text=True, timeout=120, cwd=ROOT,
        )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    line = f"reasonwire: error: cannot listen on 127.0.0.1:{port} (RW_HEALTH_HOST / RW_HEALTH_PORT): Address already in use\n"
    assert done.stderr.endswith(line), done.stderr[-2000:]
    assert done.stderr.count("cannot listen") == 1


def test_the_probes_listen_on_the_health_host(primed_group: Any) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    worker = subprocess.Popen(
        [sys.executable, "-m", "reasonwire.workers.cli", "worker", "normalize"],
        env=_env(primed_group, RW_HEALTH_HOST="127.0.0.1", RW_HEALTH_PORT=str(port)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json() == {"status": "alive"}
                break
            except httpx.HTTPError:
                assert worker.poll() is None and time.monotonic() < deadline
                time.sleep(0.3)
    finally:
        worker.terminate()
        worker.wait(30)
