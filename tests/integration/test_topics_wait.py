"""A worker whose topics are missing reports not ready and waits, with one log line, instead of
exiting 2 — a crash loop under a Deployment or ``restart: unless-stopped``.

The replay worker's topics (``reasoning.replay.*``, which no other test of a session needs
absent or present at a given moment: the workers that use them create them) are deleted from
the real test broker; a real ``reasonwire worker replay`` with ``RW_CREATE_TOPICS=false``
starts; ``/healthz`` answers, ``/readyz`` is 503 naming the topics; ``reasonwire topics apply``
creates them and the same process becomes ready. Stopping a waiting worker ends it cleanly.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from reasonwire.contracts import topics
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.contracts.topic_plan import plan
from reasonwire.workers.io.topics_admin import admin_client, apply
from tests.integration.conftest import ROOT, WorkerProcess
from tests.integration.gateway_support import free_port

pytestmark = pytest.mark.integration

WAITING = "missing Kafka topics: reasoning.replay.requests.v1, reasoning.replay.replies.v1"


async def _delete_replay_topics(bootstrap: str) -> None:
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        present = set(await admin.list_topics())
        gone = [t for t in topics.REPLAY if t in present]
        if gone:
            await admin.delete_topics(gone)
        deadline = time.monotonic() + 30
        while set(await admin.list_topics()) & set(topics.REPLAY) and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
    finally:
        await admin.close()


def _get(port: int, path: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=10)


def _until(check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.3)
    return value


def _waiting_worker(settings: WorkerSettings, log: Path) -> tuple[WorkerProcess, int]:
    port = free_port()
    worker = WorkerProcess(settings, log, {"RW_CREATE_TOPICS": "false", "RW_HEALTH_PORT": str(port)}, kind="replay")
    assert _until(lambda: WAITING in log.read_text(errors="replace") or worker.proc.poll() is not None, 60), log.read_text(errors="replace")
    time.sleep(1.5)  # the former code logged the same line and exited 2 right after it
    assert worker.proc.poll() is None, f"the worker exited ({worker.proc.returncode}): {log.read_text(errors='replace')[-2000:]}"
    return worker, port


def test_replay_worker_without_its_topics_is_not_ready_waits_and_starts_once_they_exist(primed_group: WorkerSettings, tmp_path: Path) -> None:
    asyncio.run(_delete_replay_topics(primed_group.kafka_bootstrap_servers))
    worker, port = _waiting_worker(primed_group, tmp_path / "replay.log")
    try:
        assert _get(port, "/healthz").status_code == 200  # alive: a liveness probe does not restart it
        readyz = _get(port, "/readyz")
        assert readyz.status_code == 503
        assert readyz.json() == {"ready": False, "topics_missing": list(topics.REPLAY)}
        time.sleep(6)  # more than one re-check (every 5 s): still one line, still running
        assert worker.proc.poll() is None
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": primed_group.kafka_bootstrap_servers, "RW_PARTITIONS": str(primed_group.partitions)}
        applied = subprocess.run([sys.executable, "-m", "reasonwire.workers.cli", "topics", "apply"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        # exit 1 when other topics of this shared test broker differ from the plan (another test
        # changed one): what matters here is that it created the two the worker waits for
        out = applied.stdout + applied.stderr
        assert applied.returncode in (0, 1) and "Traceback" not in out, out
        assert all(f"created {t}" in out for t in topics.REPLAY), out
        assert _until(lambda: _get(port, "/readyz").status_code == 200, 30), _get(port, "/readyz").text
    finally:
        worker.stop()
    text = worker.log.read_text(errors="replace")
    assert text.count(WAITING) == 1, text
    assert "the topics are there: starting" in text
    assert "Traceback" not in text


def test_a_worker_stopped_while_it_waits_for_topics_ends_without_a_traceback(primed_group: WorkerSettings, tmp_path: Path) -> None:
    asyncio.run(_delete_replay_topics(primed_group.kafka_bootstrap_servers))
    try:
        worker, _ = _waiting_worker(primed_group, tmp_path / "replay.log")
        worker.stop()  # SIGTERM, as Kubernetes sends it
    finally:
        asyncio.run(_create_replay_topics(primed_group))  # as the tests after this one expect them
    assert worker.proc.returncode is not None and worker.proc.returncode != -9, "not killed: it ended on SIGTERM"
    assert "Traceback" not in worker.log.read_text(errors="replace")


async def _create_replay_topics(settings: WorkerSettings) -> None:
    specs = [s for s in plan(settings.partitions, 1) if s.name in topics.REPLAY]
    await apply(settings.kafka_bootstrap_servers, specs, create=True)
