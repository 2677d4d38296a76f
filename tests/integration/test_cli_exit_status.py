"""The README's exit-status rows that need a live service on one side, the logs every command
writes, and ``make run`` keeping its viewer up.

Service-free rows are in tests/unit/test_cli_exit_status.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from reasonwire.workers.ops.settings import WorkerSettings
from tests.integration.conftest import ROOT
from tests.integration.gateway_support import GatewayProcess, free_port
from tests.signals import ctrl_c_as_in_a_terminal
from tests.unit.test_cli_errors import NOWHERE, reasonwire, run

FIXTURE = str(ROOT / "tests" / "fixtures" / "anthropic-messages" / "a_reasoning_then_answer.jsonl")


def service_env(settings: WorkerSettings, **extra: str) -> dict[str, str]:
    return {"KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers, "REDIS_URL": settings.redis_url, "RW_PARTITIONS": str(settings.partitions), **extra}


def no_noise(err: str) -> None:
    assert "Traceback" not in err and "Unclosed" not in err, err


# -- 0 ------------------------------------------------------------------------------------


def test_status_0_ingest_topics_apply_and_erase_with_the_services_up(primed_group: WorkerSettings) -> None:
    env = service_env(primed_group)
    ingest = run("ingest", "--provider", "anthropic-messages", "--run-id", f"exit-{uuid.uuid4().hex[:6]}", FIXTURE, env=env)
    assert ingest.returncode == 0 and json.loads(ingest.stdout)["outcome"] == "end", ingest.stderr
    no_noise(ingest.stderr.decode())
    check = run("topics", "apply", "--check", env=env)
    assert check.returncode in (0, 1), check.stderr  # 1: a topic differs from the plan (another session's partitions)
    no_noise(check.stderr.decode())
    erase = run("erase", "--thread", f"t-{uuid.uuid4().hex[:6]}", env=env)
    assert erase.returncode == 0
    assert "of tenant 'default' (no --tenant given)" in erase.stderr.decode()  # says which tenant


# -- 2: the gateway's own start-up failures ------------------------------------------------


def test_status_2_a_taken_gateway_port_is_one_line_and_announces_no_gateway(primed_group: WorkerSettings) -> None:
    """Nothing claims "gateway on http://…" before the port is bound, and uvicorn's error is not shown."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        # RW_CREATE_TOPICS: the run-request topic is checked before the port; this test is about the port
        # and must not depend on another test having created the topic
        env = service_env(primed_group, RW_GATEWAY_KEYS='{"keys": []}', RW_CREATE_TOPICS="true")
        done = run("gateway", "--port", str(port), env=env, timeout=90)
    err = done.stderr.decode()
    no_noise(err)
    assert done.returncode == 2
    assert err.splitlines() == [f"reasonwire: error: cannot listen on 127.0.0.1:{port} (--port): Address already in use"]


# -- 3: one service down, the other up -----------------------------------------------------


def test_status_3_gateway_with_the_broker_down_is_one_line(services: dict[str, str]) -> None:
    env = {"REDIS_URL": services["REDIS_URL"], "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{NOWHERE}", "RW_GATEWAY_KEYS": '{"keys": []}'}
    done = run("gateway", env=env, timeout=60)
    err = done.stderr.decode()
    no_noise(err)
    assert done.returncode == 3
    assert err.splitlines() == [f"reasonwire: error: cannot reach the Kafka broker at 127.0.0.1:{NOWHERE} (KAFKA_BOOTSTRAP_SERVERS): connection refused"]


# -- 130 / a clean stop after the start -----------------------------------------------------


def test_status_130_gateway_ctrl_c_once_serving_stops_it_quietly(primed_group: WorkerSettings) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [*reasonwire(), "gateway", "--port", str(port)],
        env={**os.environ, **service_env(primed_group, RW_GATEWAY_KEYS='{"keys": []}')},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=ctrl_c_as_in_a_terminal,
    )
    try:
        _until_healthy(f"http://127.0.0.1:{port}", proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    no_noise(err.decode())
    assert proc.returncode == 130 and b"KeyboardInterrupt" not in err


# -- logs ----------------------------------------------------------------------------------


def test_worker_logs_json_lines_without_colours_or_group_chatter(primed_group: WorkerSettings, tmp_path: Path) -> None:
    """RW_LOG_FORMAT=json: every line one JSON object (FastStream's and aiokafka's records too),
    no ANSI escape, and aiokafka's group-coordinator INFO records (31 of 45 lines of a demo worker's
    log before) not shown at the default level."""
    log = tmp_path / "worker.log"
    env = {**os.environ, **service_env(primed_group, RW_LOG_FORMAT="json", RW_GROUP_ID=f"logs-{uuid.uuid4().hex[:6]}", RW_HEALTH_PORT="0")}
    with log.open("wb") as out:
        proc = subprocess.Popen([*reasonwire(), "worker", "normalize"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while b"assigned to partitions" not in log.read_bytes() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    finally:
        proc.kill()
    text = log.read_text()
    assert "assigned to partitions" in text, text[-2000:]
    assert "\x1b[" not in text
    records = [json.loads(line) for line in text.splitlines()]  # every line parses
    assert {"time", "level", "logger", "message"} <= set(records[0])
    assert any(r["logger"].startswith("faststream") for r in records)  # the library's records in our format
    chatter = [r for r in records if r["logger"].startswith("aiokafka.consumer.group_coordinator") and r["level"] == "INFO"]
    assert chatter == []


@pytest.mark.parametrize("access_log", [True, False])
def test_gateway_access_log_is_a_setting_and_uncoloured(primed_group: WorkerSettings, tmp_path: Path, access_log: bool) -> None:
    extra = {"RW_GATEWAY_ACCESS_LOG": "true"} if access_log else {}
    gateway = GatewayProcess(primed_group, tmp_path / "gateway.log", extra_env=extra)
    try:
        assert httpx.get(gateway.url + "/healthz", timeout=5).status_code == 200
    finally:
        gateway.stop()
    text = gateway.log.read_text()
    assert "\x1b[" not in text
    assert ('"GET /healthz HTTP/1.1" 200' in text) is access_log, text[-2000:]


# -- make run keeps the viewer up ----------------------------------------------------------


def test_make_runs_demo_holds_the_gateway_until_ctrl_c_when_asked(primed_group: WorkerSettings, tmp_path: Path) -> None:
    """RW_DEMO_HOLD=1 (the default in a terminal): the viewer URLs printed answer after the demo
    returned, and Ctrl-C stops the gateway and ends the script with the demo's status."""
    import sys

    port = free_port()
    env = {
        **os.environ,
        **service_env(primed_group, RW_CREATE_TOPICS="true", RW_HEALTH_PORT="0", RW_GROUP_ID=primed_group.group_id),
        "VENV": str(Path(sys.executable).parent.parent),
        "GATEWAY_PORT": str(port),
        "RW_DEMO_HOLD": "1",
    }
    out = tmp_path / "run.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(["bash", str(ROOT / "deploy" / "run-demo.sh")], cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while b"press Ctrl-C" not in out.read_bytes() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        text = out.read_text()
        assert "press Ctrl-C" in text, text[-3000:]
        viewer = next(line.strip() for line in text.splitlines() if "/v1/viewer?" in line)
        assert httpx.get(viewer.split("#")[0], timeout=10).status_code == 200  # the URL printed answers now
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground group
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "gateway stopped" in out.read_text()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)


def _until_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError(f"gateway never answered (exit {proc.poll()})")
