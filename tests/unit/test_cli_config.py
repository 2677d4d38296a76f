"""One configuration model: each command's ``--help`` lists exactly the variables
it reads, it refuses a bad value of each of them, it ignores every other one, and
docs/operations.md documents each variable once with the commands that read it.

"Reads" is checked by behaviour, not by comparing a list with itself: a command is run with a
bad value of one of its listed variables (it must stop, exit 2, naming it) and with bad values
of every variable it does not list (it must not care: it goes on to its service check, which
fails on a closed port, exit 3 — or succeeds, for the commands that need no service).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasonwire.workers import cli
from reasonwire.workers.ops.settings import (
    AsyncApiSettings,
    DemoSettings,
    EraseSettings,
    GatewaySettings,
    IngestSettings,
    NormalizeSettings,
    ReplaySettings,
    ReplayWorkerSettings,
    Settings,
    TopicPlanSettings,
    TopicsApplySettings,
    all_env_names,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = str(ROOT / "tests" / "fixtures" / "anthropic-messages" / "a_reasoning_then_answer.jsonl")

# command → (argv, its settings class, exit status once past the settings with no service up)
COMMANDS: dict[str, tuple[list[str], type[Settings] | None, int]] = {
    "worker normalize": (["worker", "normalize"], NormalizeSettings, 3),
    "worker replay": (["worker", "replay"], ReplayWorkerSettings, 3),
    "demo": (["demo"], DemoSettings, 3),
    "erase": (["erase", "--tenant", "t", "--thread", "t"], EraseSettings, 3),
    "replay": (["replay", "--provider", "anthropic-messages", "--thread-id", "t", "-"], ReplaySettings, 3),
    "ingest": (["ingest", "--provider", "anthropic-messages", "--run-id", "r", FIXTURE], IngestSettings, 3),
    "gateway": (["gateway"], GatewaySettings, 3),
    "topics plan": (["topics", "plan"], TopicPlanSettings, 0),
    "topics apply": (["topics", "apply", "--check"], TopicsApplySettings, 3),
    "asyncapi": (["asyncapi", "--output", os.devnull], AsyncApiSettings, 0),
    "translate": (["translate", "--provider", "anthropic-messages", FIXTURE], None, 0),
}

SPECIAL_BAD = {
    "KAFKA_BOOTSTRAP_SERVERS": "broker:port",
    "KAFKA_SECURITY_PROTOCOL": "CARRIER_PIGEON",
    "KAFKA_SASL_MECHANISM": "PLAIN",  # without a SASL protocol
    "KAFKA_SSL_CAFILE": "/no/such/ca.pem",  # without TLS, and unreadable
    "KAFKA_SSL_CERTFILE": "/no/such/cert.pem",
    "KAFKA_SSL_KEYFILE": "/no/such/key.pem",
    "REDIS_URL": "ftp://cache/0",
    "RW_POLICY_FILE": "/no/such/policy.json",
    "RW_GATEWAY_KEYS_FILE": "/no/such/keys.json",
    "RW_GATEWAY_KEYS": "{not json",
}
"""Values no command can use, for variables whose type alone does not refuse a word."""


def bad_value(kind: type[Settings], field: str) -> str | None:
    """A value of ``field`` that ``kind`` must refuse; None where every string is valid (a group id, a host)."""
    variable = kind.env_names()[field]
    if variable in SPECIAL_BAD:
        return SPECIAL_BAD[variable]
    annotation = kind.model_fields[field].annotation
    if annotation in (int, float):
        return "eleven"
    if annotation is bool:
        return "perhaps"
    if typing.get_origin(annotation) is typing.Literal:
        return "loudly"
    return None


def every_bad_value() -> dict[str, str]:
    """Every variable of every command with a value that cannot be used."""
    out: dict[str, str] = {}
    for _, kind, _ in COMMANDS.values():
        for field, variable in (kind.env_names() if kind else {}).items():
            if (value := bad_value(kind, field)) is not None:  # type: ignore[arg-type]
                out.setdefault(variable, value)
    return out


@pytest.fixture
def nowhere() -> Iterator[int]:
    """A local port bound, never listening: a service there is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, nowhere: int) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith(("RW_", "KAFKA_", "REDIS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{nowhere}")
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{nowhere}/0")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"[]")))
    return monkeypatch


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with contextlib.redirect_stdout(io.TextIOWrapper(io.BytesIO())):
        status = cli.main(argv)
    return status, capsys.readouterr().err


def help_variables(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    settings = text.split("settings (environment variables")[1] if "settings (environment variables" in text else ""
    return re.findall(r"^  ([A-Z][A-Z0-9_]+)  ", settings, flags=re.M)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_exactly_the_variables_of_the_commands_settings(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv, kind, _ = COMMANDS[command]
    listed = help_variables(command.split(), capsys)
    assert len(listed) == len(set(listed))
    assert set(listed) == set(kind.env_names().values() if kind else ())


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_ignores_every_variable_it_does_not_list(
    command: str, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad values of every variable the command's --help does not list: no effect on it."""
    argv, kind, past_settings = COMMANDS[command]
    mine = set(kind.env_names().values()) if kind else set()
    for variable, value in every_bad_value().items():
        if variable not in mine and variable not in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL"):
            clean_env.setenv(variable, value)
    status, err = run(argv, capsys)
    assert status == past_settings, err
    assert "bad configuration" not in err and "Traceback" not in err


def _read_cases() -> list[tuple[str, str, str]]:
    cases = []
    for command, (_, kind, _) in COMMANDS.items():
        for field, variable in (kind.env_names() if kind else {}).items():
            if (value := bad_value(kind, field)) is not None:  # type: ignore[arg-type]
                cases.append((command, variable, value))
    return cases


@pytest.mark.parametrize(("command", "variable", "value"), _read_cases(), ids=[f"{c}-{v}" for c, v, _ in _read_cases()])
def test_a_command_refuses_a_bad_value_of_each_variable_it_lists(
    command: str, variable: str, value: str, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, _, _ = COMMANDS[command]
    clean_env.setenv(variable, value)
    status, err = run(argv, capsys)
    assert status == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("reasonwire: error: ") and variable in lines[0], err


READ_BY = {
    "W": ("worker normalize", "demo"),
    "R": ("worker replay",),
    "G": ("gateway",),
    "E": ("erase",),
    "P": ("replay",),
    "I": ("ingest",),
    "T": ("topics plan", "topics apply", "asyncapi"),
}


def test_operations_md_names_the_commands_that_read_each_variable() -> None:
    """The "read by" column of docs/operations.md is the models' truth, so an operator can trust it."""
    table = (ROOT / "docs" / "operations.md").read_text().split("## Configuration (environment)")[1].split("\n## ")[0]
    rows = re.findall(r"^\| `([A-Z_]+)` \| [^|]* \| [^|]* \| ([^|]*) \|", table, flags=re.M)
    assert {v for v, _ in rows} == set(all_env_names())
    for variable, read_by in rows:
        readers = {name for name, (_, kind, _) in COMMANDS.items() if kind and variable in kind.env_names().values()}
        documented = set()
        for token in read_by.replace("`", "").split():
            documented |= set(READ_BY.get(token, (token,)))
        if variable in ("RW_SAMPLES", "RW_GATEWAY_URL", "RW_DEMO_KEY"):
            assert readers == documented == {"demo"}
            continue
        # a "T" row is read by whichever of the topic commands has it (plan has no broker)
        assert readers <= documented and readers >= documented - set(READ_BY["T"]), (variable, readers, documented)
