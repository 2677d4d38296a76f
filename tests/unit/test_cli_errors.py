"""No traceback for anything a user can get wrong.

Every case runs the real ``reasonwire`` entry point as a subprocess and checks
the contract of ``reasonwire.workers.ops.errors``: exactly one line on stderr that names the
cause and the variable or path, no ``Traceback``, and the documented exit
status (2 bad arguments/input/configuration, 3 a service unreachable). A
service that is "down" is a local port bound without listening, so nothing
answers there and no service is needed.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.signals import ctrl_c_as_in_a_terminal

STREAM = b"\n".join(
    [
        b'{"type":"message_start","message":{"model":"claude-sonnet-4-5","id":"msg_cli","type":"message","role":"assistant","content":[],"usage":{"input_tokens":3,"output_tokens":1}}}',
        b'{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}',
        b'{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me think."}}',
        b'{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCkYIBRgCKkBcli=="}}',
        b'{"type":"content_block_stop","index":0}',
        b'{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}',
        b'{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"42."}}',
        b'{"type":"content_block_stop","index":1}',
        b'{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}',
        b'{"type":"message_stop"}',
    ]
)
"""A small, complete Anthropic Messages stream (one thinking block with its signature, one answer)."""

SERVICE_VARS = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL")


def reasonwire() -> list[str]:
    """The installed console script (the entry point users run); the module when not installed."""
    script = Path(sys.executable).with_name("reasonwire")
    return [str(script)] if script.exists() else [sys.executable, "-m", "reasonwire.workers.cli"]


def _nowhere() -> int:
    """A local port bound (never listening) for this process's life: nothing answers there."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    return int(sock.getsockname()[1])


_HELD: list[socket.socket] = []
NOWHERE = _nowhere()


def run(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """``reasonwire ARGS`` with no RW_* or service variable inherited, only what the test sets; the
    services default to a port where nothing answers, so no test ever reaches a default-port service."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("RW_") and k not in SERVICE_VARS}
    base |= {"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{NOWHERE}", "REDIS_URL": f"redis://127.0.0.1:{NOWHERE}/0"}
    return subprocess.run([*reasonwire(), *args], input=stdin, env={**base, **(env or {})}, capture_output=True, timeout=timeout, check=False)


def one_line(done: subprocess.CompletedProcess[bytes]) -> str:
    """The single stderr line of a clean failure; fails the test on a traceback or several lines."""
    err = done.stderr.decode()
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("reasonwire: error: "), err
    return lines[0]


@pytest.fixture(scope="module")
def closed_port() -> int:
    """A local port bound but not listening: connecting is refused at once, and no one else gets it."""
    return NOWHERE


# Every command that reads the settings, with the arguments it needs to get that far.
COMMANDS = {
    "worker normalize": ["worker", "normalize"],
    "worker replay": ["worker", "replay"],
    "demo": ["demo"],
    "erase": ["erase", "--thread", "t"],
    "replay": ["replay", "--provider", "anthropic-messages", "--thread-id", "t", "-"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_rw_value_is_one_line_naming_the_variable_exit_2(command: str, closed_port: int) -> None:
    done = run(*COMMANDS[command], env={"RW_JOURNAL_TTL_S": "eight", "REDIS_URL": f"redis://127.0.0.1:{closed_port}/0"}, stdin=b"[]")
    line = one_line(done)
    assert done.returncode == 2
    assert "RW_JOURNAL_TTL_S" in line and "'eight'" in line


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("RW_MAX_BATCH", "0", "greater than 0"),
        ("RW_INACTIVITY_TIMEOUT_S", "soon", "valid number"),
        ("RW_MAX_IN_FLIGHT", "-1", "greater than 0"),
        ("RW_FETCH_MAX_WAIT_MS", "60000", "less than or equal to 10000"),
        ("KAFKA_BOOTSTRAP_SERVERS", "broker:port", "host:port"),
        ("REDIS_URL", "localhost:6379", "redis://"),
    ],
)
def test_each_setting_is_validated_at_start_exit_2(variable: str, value: str, says: str) -> None:
    done = run("worker", "normalize", env={variable: value})
    line = one_line(done)
    assert done.returncode == 2
    assert variable in line and says in line


def test_a_redis_url_with_a_password_is_never_printed(closed_port: int) -> None:
    done = run("erase", "--thread", "t", env={"REDIS_URL": f"redis://user:hunter2@127.0.0.1:{closed_port}/0"})
    line = one_line(done)
    assert done.returncode == 3 and "hunter2" not in line
    bad = run("erase", "--thread", "t", env={"REDIS_URL": "http://user:hunter2@host/0"})
    assert bad.returncode == 2 and "REDIS_URL" in one_line(bad) and "hunter2" not in bad.stderr.decode()


@pytest.mark.parametrize("command", ["worker normalize", "demo"])  # the replay worker applies no policy
def test_an_unknown_policy_file_is_one_line_naming_rw_policy_file_exit_2(command: str, tmp_path: Path) -> None:
    missing = tmp_path / "policy.json"
    done = run(*COMMANDS[command], env={"RW_POLICY_FILE": str(missing)})
    line = one_line(done)
    assert done.returncode == 2
    assert "RW_POLICY_FILE" in line and str(missing) in line


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"{not json", "is not JSON"),
        (b'{"default": {"forward_raw_events": true}}', "is not a valid policy"),
        (b"\xff\xfe binary", "not UTF-8"),
    ],
)
def test_an_invalid_policy_file_is_one_line_exit_2(content: bytes, says: str, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_bytes(content)
    done = run("worker", "normalize", env={"RW_POLICY_FILE": str(policy)})
    line = one_line(done)
    assert done.returncode == 2
    assert "RW_POLICY_FILE" in line and says in line


@pytest.mark.parametrize("command", COMMANDS)
def test_redis_down_is_one_line_naming_redis_url_exit_3_within_seconds(command: str, closed_port: int) -> None:
    started = time.monotonic()
    done = run(*COMMANDS[command], env={"REDIS_URL": f"redis://127.0.0.1:{closed_port}/0"}, stdin=b"[]", timeout=30)
    line = one_line(done)
    assert done.returncode == 3
    assert "Redis" in line and "REDIS_URL" in line
    assert time.monotonic() - started < 30


def test_help_of_the_workers_lists_every_setting_with_its_default() -> None:
    from reasonwire.workers.ops.settings import NormalizeSettings, ReplayWorkerSettings, show_default

    for command, kind in ((["worker", "normalize"], NormalizeSettings), (["worker", "replay"], ReplayWorkerSettings)):
        done = run(*command, "--help")
        assert done.returncode == 0
        text = done.stdout.decode()
        for name, variable in kind.env_names().items():
            default = kind.model_fields[name].default
            line = next(line for line in text.splitlines() if line.strip().startswith(variable + " "))
            assert f"(default: {show_default(default)})" in line


def test_version_is_the_installed_package_version() -> None:
    from importlib.metadata import version

    done = run("--version")
    assert done.returncode == 0
    assert done.stdout.decode().strip() == f"reasonwire {version('reasonwire')}"


# -- unwritable paths, empty input, another grammar's stream, unknown events ----------------


@pytest.mark.parametrize("where", ["missing folder", "a directory"])
def test_translate_unwritable_artefacts_path_is_one_line_exit_2(where: str, tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "folder" / "a.jsonl" if where == "missing folder" else tmp_path
    done = run("translate", "--provider", "anthropic-messages", "--artefacts", str(path), "-", stdin=STREAM)
    line = one_line(done)
    assert done.returncode == 2
    assert str(path) in line and "--artefacts" in line
    assert done.stdout == b""  # refused before translating anything


def test_replay_binary_artefacts_file_is_one_line_exit_2(tmp_path: Path) -> None:
    artefacts = tmp_path / "artefacts.jsonl"
    artefacts.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xd8")
    done = run("replay", "--provider", "anthropic-messages", "--artefacts", str(artefacts), "-", stdin=b"[]")
    line = one_line(done)
    assert done.returncode == 2
    assert str(artefacts) in line and "UTF-8" in line


@pytest.mark.parametrize("text", [b"", b"\n", b"  \n\t\n\r\n"], ids=["empty", "newline", "blank lines"])
def test_translate_empty_input_exits_2(text: bytes) -> None:
    done = run("translate", "--provider", "anthropic-messages", "-", stdin=text)
    assert one_line(done) == "reasonwire: error: input held no events"
    assert done.returncode == 2
    assert done.stdout == b""  # no invented RUN_STARTED / RUN_ERROR


OTHER_GRAMMARS = {
    "openai-responses": (b'{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress"}}', "'response.created'"),
    "gemini-interactions": (b'{"event_type":"interaction.start","interaction":{"id":"i1","model":"gemini-3-pro"}}', "'interaction.start'"),
    "gemini-generate-content": (b'{"candidates":[{"content":{"parts":[{"text":"hi"}],"role":"model"}}],"responseId":"r1"}', "'candidates'"),
}


@pytest.mark.parametrize("grammar", OTHER_GRAMMARS)
def test_translate_stream_of_another_grammar_says_so_once_exit_2(grammar: str) -> None:
    line, first_type = OTHER_GRAMMARS[grammar]
    done = run("translate", "--provider", "anthropic-messages", "-", stdin=b"\n".join([line] * 30))
    message = one_line(done)
    assert done.returncode == 2
    assert "this is not an anthropic-messages stream" in message and first_type in message
    assert done.stdout == b""


def test_translate_anthropic_stream_given_as_openai_is_refused() -> None:
    done = run("translate", "--provider", "openai-responses", "-", stdin=STREAM)
    message = one_line(done)
    assert done.returncode == 2
    assert message == (
        "reasonwire: error: this is not an openai-responses stream"
        " (no event recognised; first event type: 'message_start'; it reads as anthropic-messages)"
    )


def test_translate_anthropic_stream_given_as_bedrock_is_refused_not_malformed() -> None:
    """Bedrock reads a two-key object as a malformed event; when another grammar reads that first
    event, the stream is another grammar's: one line, exit 2, nothing on stdout."""
    done = run("translate", "--provider", "bedrock-converse", "-", stdin=STREAM)
    message = one_line(done)
    assert done.returncode == 2 and done.stdout == b""
    assert "this is not a bedrock-converse stream" in message and "it reads as anthropic-messages" in message


def test_a_malformed_first_event_of_the_right_grammar_is_still_malformed_R7() -> None:
    done = run("translate", "--provider", "bedrock-converse", "-", stdin=b'{"messageStart":{"role":"assistant"},"stray":1}\n')
    assert done.returncode == 1
    assert "malformed bedrock-converse event at line 1" in done.stderr.decode()


def test_translate_a_real_stream_with_many_unknown_events_still_translates_and_counts_the_rest() -> None:
    lines = STREAM.split(b"\n")
    noisy = [lines[0], *[b'{"type":"mystery_%d"}' % i for i in range(25)], *lines[1:]]
    done = run("translate", "--provider", "anthropic-messages", "-", stdin=b"\n".join(noisy))
    assert done.returncode == 0, done.stderr
    err = done.stderr.decode().splitlines()
    assert len([e for e in err if "unknown anthropic-messages event type" in e]) == 10
    assert err[-1] == "reasonwire: warning: 15 more unknown_event warnings not shown"
    assert json.loads(done.stdout.splitlines()[-1])["type"] == "RUN_FINISHED"


def test_translate_unknown_events_before_the_first_known_one_are_kept() -> None:
    """Held while undecided, not dropped: a stream that opens with unknown events still translates."""
    done = run("translate", "--provider", "anthropic-messages", "-", stdin=b'{"type":"preamble"}\n' + STREAM)
    assert done.returncode == 0, done.stderr
    assert "input line 1: unknown anthropic-messages event type 'preamble' skipped" in done.stderr.decode()
    types = [json.loads(line)["type"] for line in done.stdout.splitlines()]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"


def test_interrupt_is_quiet_exit_130() -> None:
    """Ctrl-C on a live `translate` is a user's action, not a crash."""
    proc = subprocess.Popen(
        [*reasonwire(), "translate", "--provider", "anthropic-messages", "-"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=ctrl_c_as_in_a_terminal,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(STREAM.split(b"\n")[0] + b"\n")
        proc.stdin.flush()
        assert select.select([proc.stdout], [], [], 30)[0], "no output for the first line"  # up and translating
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130 and b"Traceback" not in err


def test_gateway_bad_setting_is_one_line_naming_the_variable_exit_2() -> None:
    done = run("gateway", env={"RW_GATEWAY_MAX_RUNS": "lots"})
    line = one_line(done)
    assert done.returncode == 2
    assert "RW_GATEWAY_MAX_RUNS" in line and "'lots'" in line


def test_a_bad_gateway_port_only_concerns_the_gateway() -> None:
    """A bad RW_GATEWAY_PORT is the gateway's one line naming that variable (exit 2) — not an
    argparse error about a ``--port`` flag nobody passed — and every other
    command still runs."""
    done = run("gateway", env={"RW_GATEWAY_PORT": "http"})
    line = one_line(done)
    assert done.returncode == 2 and "RW_GATEWAY_PORT" in line and "'http'" in line and "--port" not in line
    other = run("--version", env={"RW_GATEWAY_PORT": "http"})
    assert other.returncode == 0 and b"Traceback" not in other.stderr
