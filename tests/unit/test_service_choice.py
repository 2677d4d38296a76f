"""Which services the integration tests use: named servers, testcontainers, or deploy/services.sh.

This machine has no Docker engine, so the testcontainers path itself is only exercised
here, for its selection (and that its modules import); the local path runs for real.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.integration.service_choice import ServiceChoiceError, choose, docker_answers

ROOT = Path(__file__).resolve().parents[2]
NAMED = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:29092", "REDIS_URL": "redis://127.0.0.1:26379/0"}


def never_asked() -> bool:
    raise AssertionError("Docker was probed although the choice was already made")


def test_docker_answering_chooses_testcontainers() -> None:
    assert choose({}, lambda: True) == "testcontainers"


def test_no_docker_chooses_local_services() -> None:
    assert choose({}, lambda: False) == "local"


@pytest.mark.parametrize("value", ["testcontainers", "local"])
def test_rw_services_overrides_the_probe(value: str) -> None:
    assert choose({"RW_SERVICES": value}, never_asked) == value


def test_rw_services_local_wins_over_an_answering_docker() -> None:
    assert choose({"RW_SERVICES": "local"}, lambda: True) == "local"


def test_named_servers_win_over_everything() -> None:
    assert choose({**NAMED, "RW_SERVICES": "testcontainers"}, never_asked) == "given"


def test_one_named_server_is_not_enough_to_skip_starting_the_other() -> None:
    assert choose({"REDIS_URL": NAMED["REDIS_URL"]}, lambda: False) == "local"
    assert choose({"KAFKA_BOOTSTRAP_SERVERS": NAMED["KAFKA_BOOTSTRAP_SERVERS"]}, lambda: True) == "testcontainers"


def test_unknown_rw_services_value_is_refused_naming_the_variable() -> None:
    with pytest.raises(ServiceChoiceError, match=r"RW_SERVICES='docker': use one of testcontainers, local"):
        choose({"RW_SERVICES": "docker"}, never_asked)


def test_probe_says_no_for_a_missing_socket(tmp_path: Path) -> None:
    assert docker_answers({"DOCKER_HOST": f"unix://{tmp_path}/docker.sock"}) is False


def test_probe_says_no_for_an_unsupported_scheme() -> None:
    assert docker_answers({"DOCKER_HOST": "ssh://user@host"}) is False


def _one_shot_server(tmp_path: Path, reply: bytes) -> str:
    """A unix socket that answers one request with ``reply``, like the engine's /_ping."""
    path = str(tmp_path / "engine.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn, server:
            conn.recv(1024)
            conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    return f"unix://{path}"


def test_probe_says_yes_when_the_engine_answers_ping(tmp_path: Path) -> None:
    host = _one_shot_server(tmp_path, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")
    assert docker_answers({"DOCKER_HOST": host}) is True


def test_probe_says_no_when_something_else_answers(tmp_path: Path) -> None:
    host = _one_shot_server(tmp_path, b"HTTP/1.1 404 Not Found\r\n\r\n")
    assert docker_answers({"DOCKER_HOST": host}) is False


def test_command_prints_the_choice_the_makefile_reads() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tests.integration.service_choice"],
        env={"PATH": "/usr/bin:/bin", **NAMED},
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert (out.returncode, out.stdout) == (0, "given\n")


def test_command_refuses_a_bad_rw_services_in_one_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tests.integration.service_choice"],
        env={"PATH": "/usr/bin:/bin", "RW_SERVICES": "docker"},
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "RW_SERVICES" in out.stderr and "Traceback" not in out.stderr


def test_testcontainers_path_has_its_kafka_and_redis_modules() -> None:
    """The declared dependency is the one the fixtures import (no engine is needed to import)."""
    from testcontainers.community.kafka import KafkaContainer
    from testcontainers.community.redis import RedisContainer

    assert callable(KafkaContainer.with_kraft) and RedisContainer.get_exposed_port
