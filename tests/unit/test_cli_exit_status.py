"""The README's exit-status table, row by row, for every command that can hit the row without a
running service. Rows that need a live broker or Redis on one side are in
tests/integration/test_cli_exit_status.py.

Every case runs the installed ``reasonwire`` script as a user would and checks stderr: one line
(``reasonwire: error: …``) where the command fails, and never ``Traceback`` nor aiokafka's
``Unclosed AIOKafkaProducer``. A service that is "down" is a local port bound without listening
(refused at once); one that "hangs" is a port that accepts connections and never answers.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.signals import ctrl_c_as_in_a_terminal
from tests.unit.test_cli_errors import NOWHERE, STREAM, reasonwire, run

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = str(ROOT / "tests" / "fixtures" / "anthropic-messages" / "a_reasoning_then_answer.jsonl")

NEEDS_SERVICES = {
    "worker normalize": ["worker", "normalize"],
    "worker replay": ["worker", "replay"],
    "demo": ["demo"],
    "erase": ["erase", "--tenant", "t", "--thread", "t"],
    "replay": ["replay", "--provider", "anthropic-messages", "--thread-id", "t", "-"],
    "ingest": ["ingest", "--provider", "anthropic-messages", "--run-id", "r", FIXTURE],
    "gateway": ["gateway"],
    "topics apply": ["topics", "apply", "--check"],
}
"""Every command that talks to Kafka or Redis, with the arguments it needs to get that far."""

USES_REDIS = {"worker normalize", "worker replay", "demo", "erase", "replay", "gateway"}


def clean(done: subprocess.CompletedProcess[bytes]) -> str:
    err = done.stderr.decode()
    assert "Traceback" not in err and "Unclosed" not in err, err
    return err


def one_error_line(done: subprocess.CompletedProcess[bytes]) -> str:
    lines = clean(done).splitlines()
    assert len(lines) == 1 and lines[0].startswith("reasonwire: error: "), lines
    return lines[0]


# -- 0: done -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [["translate", "--provider", "anthropic-messages", FIXTURE], ["topics", "plan"], ["asyncapi"], ["gateway", "--hash-key", "k"], ["--version"]],
    ids=" ".join,
)
def test_status_0_done(argv: list[str]) -> None:
    done = run(*argv)
    clean(done)
    assert done.returncode == 0 and done.stdout


# -- 1: translate's malformed event; replay's provider would reject (other tests: test_replay_cli.py)


def test_status_1_translate_malformed_event_names_the_line() -> None:
    done = run("translate", "--provider", "bedrock-converse", "-", stdin=b'{"messageStart":{"role":"assistant"},"stray":1}\n')
    assert done.returncode == 1 and "line 1" in clean(done)


# -- 2: bad arguments, input, path or configuration ----------------------------------------


@pytest.mark.parametrize("command", [*NEEDS_SERVICES, "translate", "topics plan", "asyncapi"])
def test_status_2_unusable_arguments(command: str) -> None:
    argv = NEEDS_SERVICES.get(command, command.split())
    done = run(*argv[: 2 if argv[0] in ("worker", "topics") else 1], "--no-such-flag")
    assert done.returncode == 2 and "Traceback" not in done.stderr.decode()


@pytest.mark.parametrize(
    ("command", "variable"),
    [(c, "RW_REPLICATION_FACTOR") for c in ("worker normalize", "worker replay", "demo", "gateway", "topics apply")]
    + [("topics plan", "RW_REPLICATION_FACTOR"), ("asyncapi", "RW_REPLICATION_FACTOR")]
    + [(c, "RW_LOG_LEVEL") for c in ("erase", "ingest")]
    + [("replay", "RW_ARTEFACT_TTL_S")],
)
def test_status_2_a_bad_setting_is_error_colon_one_line(command: str, variable: str) -> None:
    """``RW_REPLICATION_FACTOR=x`` used to end with exit 1 and no ``error:`` (``topics plan``)."""
    argv = NEEDS_SERVICES.get(command, command.split())
    done = run(*argv, env={variable: "x"}, stdin=b"[]")
    line = one_error_line(done)
    assert done.returncode == 2 and variable in line and "'x'" in line


def test_status_2_gateway_port_setting_names_the_variable_not_a_flag() -> None:
    done = run("gateway", env={"RW_GATEWAY_PORT": "abc"})
    line = one_error_line(done)
    assert done.returncode == 2 and "RW_GATEWAY_PORT" in line and "--port" not in line


@pytest.mark.parametrize("command", ["ingest", "translate"])
def test_status_2_unreadable_input(command: str, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.jsonl")
    argv = ["ingest", "--provider", "anthropic-messages", "--run-id", "r", missing] if command == "ingest" else ["translate", "--provider", "anthropic-messages", missing]
    done = run(*argv, env={"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"} if command == "translate" else None)
    if command == "ingest":  # the broker is checked first (nothing is read before the command can publish)
        assert done.returncode == 3 and "KAFKA_BOOTSTRAP_SERVERS" in one_error_line(done)
    else:
        assert done.returncode == 2 and missing in one_error_line(done)


# -- 3: a service is unreachable -----------------------------------------------------------


@pytest.mark.parametrize("command", NEEDS_SERVICES)
def test_status_3_service_down_is_one_line_naming_it(command: str) -> None:
    """``gateway`` and ``ingest`` used to exit 1, ``ingest`` with four lines ending "Unclosed AIOKafkaProducer"."""
    done = run(*NEEDS_SERVICES[command], stdin=b"[]", timeout=45)
    line = one_error_line(done)
    assert done.returncode == 3
    variable = "REDIS_URL" if command in USES_REDIS else "KAFKA_BOOTSTRAP_SERVERS"
    assert variable in line and f"127.0.0.1:{NOWHERE}" in line


# -- 130: interrupted ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def hanging_port() -> Iterator[int]:
    """A port that accepts connections and never answers: a command's start-up waits there."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join()
    for sock in held:
        sock.close()
    server.close()


def _importing_ours(pid: int, timeout: float = 60) -> None:
    """Until the process has loaded pydantic's compiled core: it runs reasonwire's imports now. (A
    Ctrl-C before that, in the interpreter's own start-up — its ``site`` module — is Python's to
    report, not the command's; on a loaded machine that start-up alone can take a second.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if "pydantic_core" in Path(f"/proc/{pid}/maps").read_text():
                return
        except OSError:
            return
        time.sleep(0.01)


@pytest.mark.parametrize("after_s", [0.0, 2.5], ids=["while-importing", "while-checking-services"])
@pytest.mark.parametrize("command", NEEDS_SERVICES)
def test_status_130_ctrl_c_during_start_up_is_quiet(command: str, after_s: float, hanging_port: int) -> None:
    """Ctrl-C while the command loads or waits for a service: exit 130, nothing on stderr (it used
    to be a KeyboardInterrupt traceback from inside an import, or pydantic's SchemaError, exit 1)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RW_")}
    env |= {"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{hanging_port}", "REDIS_URL": f"redis://127.0.0.1:{hanging_port}/0"}
    proc = subprocess.Popen(
        [*reasonwire(), *NEEDS_SERVICES[command]],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=ctrl_c_as_in_a_terminal,
    )
    try:
        _importing_ours(proc.pid)
        time.sleep(after_s)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    text = err.decode()
    assert proc.returncode == 130, text
    assert "Traceback" not in text and "Unclosed" not in text and "KeyboardInterrupt" not in text, text


def test_status_130_translate_interrupted() -> None:
    proc = subprocess.Popen(
        [*reasonwire(), "translate", "--provider", "anthropic-messages", "-"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=ctrl_c_as_in_a_terminal,
    )
    assert proc.stdin is not None
    proc.stdin.write(STREAM.split(b"\n")[0] + b"\n")
    proc.stdin.flush()
    time.sleep(2.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and b"Traceback" not in err
