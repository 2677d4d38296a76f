"""`reasonwire replay` offline (with the file `reasonwire translate --artefacts` writes), and the
replay worker's sans-I/O request → reply step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayReply, ReplayRequest, ReplayTarget
from tests.conformance.oracle import LOCAL_FIXTURES
from tests.unit.test_replay_roundtrip import (
    client_history,
    expected_request_items,
    opaque_hashes,
    replay_items,
    tool_results,
    translate,
    user_text,
)
from reasonwire.workers.services.replay_worker import parse_request, reply_for

FIXTURE = LOCAL_FIXTURES / "anthropic-messages" / "b_reasoning_then_tool_call.jsonl"
MODEL = "claude-sonnet-4-5-20250929"


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "reasonwire.workers.cli", *args], input=stdin, capture_output=True, check=False)


def _history_and_artefacts(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    artefacts = tmp_path / "artefacts.jsonl"
    done = _cli("translate", "--provider", "anthropic-messages", "--artefacts", str(artefacts), str(FIXTURE))
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    out = translate(FIXTURE)
    assert events == out.events
    items = replay_items(FIXTURE) or []
    grammar = Grammar.ANTHROPIC_MESSAGES
    expected = json.loads(FIXTURE.with_suffix(".expected.json").read_text())
    messages = client_history(out, grammar, user_text(grammar, expected, items), tool_results(grammar, items))
    return {"threadId": "thread-1", "runId": "run-2", "messages": messages}, artefacts


def test_replay_command_writes_the_provider_native_fragment_from_an_artefact_file_P5(tmp_path: Path) -> None:
    run_input, artefacts = _history_and_artefacts(tmp_path)
    done = _cli(
        "replay", "--provider", "anthropic-messages", "--model", MODEL, "--artefacts", str(artefacts), "-",
        stdin=json.dumps(run_input).encode(),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"messages": expected_request_items(FIXTURE)}
    assert done.stderr == b""


def test_replay_command_accepts_a_bare_messages_array_from_a_file(tmp_path: Path) -> None:
    run_input, artefacts = _history_and_artefacts(tmp_path)
    history = tmp_path / "history.json"
    history.write_text(json.dumps(run_input["messages"]))
    done = _cli("replay", "--provider", "anthropic-messages", "--artefacts", str(artefacts), str(history))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"messages": expected_request_items(FIXTURE)}
    assert b"assuming model family 'claude-sonnet-4-5'" in done.stderr


def test_replay_command_fails_before_the_call_with_status_1_when_the_provider_would_reject(tmp_path: Path) -> None:
    run_input, artefacts = _history_and_artefacts(tmp_path)
    done = _cli(
        "replay", "--provider", "anthropic-messages", "--model", "claude-opus-4-1", "--artefacts", str(artefacts), "-",
        stdin=json.dumps(run_input).encode(),
    )
    assert done.returncode == 1
    assert done.stdout == b""
    assert b"rejects a tool-use continuation" in done.stderr and b"Traceback" not in done.stderr
    values = [json.loads(line)["value"] for line in artefacts.read_text().splitlines()]
    assert not any(v.encode() in done.stderr for v in values)  # P8


def test_replay_command_warns_on_stderr_without_values_when_it_leaves_state_out(tmp_path: Path) -> None:
    run_input, artefacts = _history_and_artefacts(tmp_path)
    run_input["messages"] = run_input["messages"][:-1] + [{"id": "u2", "role": "user", "content": "Thanks"}]
    done = _cli(
        "replay", "--provider", "bedrock-converse", "--model", "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "--artefacts", str(artefacts), "-", stdin=json.dumps(run_input).encode(),
    )
    assert done.returncode == 0, done.stderr
    assert opaque_hashes(json.loads(done.stdout)) == []
    assert b"issued by anthropic-messages" in done.stderr


def test_replay_command_refuses_unusable_input_with_status_2(tmp_path: Path) -> None:
    assert _cli("replay", "--provider", "anthropic-messages", "--artefacts", "/nonexistent", "-", stdin=b"[]").returncode == 2
    bad = _cli("replay", "--provider", "anthropic-messages", "--artefacts", str(tmp_path / "x"), "-", stdin=b"{not json")
    assert bad.returncode == 2 and b"not JSON" in bad.stderr
    bare = _cli("replay", "--provider", "anthropic-messages", "-", stdin=b"[]")
    assert bare.returncode == 2 and b"--thread-id" in bare.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"kind": "x"}\n')
    done = _cli("replay", "--provider", "anthropic-messages", "--artefacts", str(broken), "-", stdin=b"[]")
    assert done.returncode == 2 and b"line 1 is not an artefact record" in done.stderr


# -- the worker's request → reply, without a broker -----------------------------------------------------


def test_a_replay_request_is_answered_with_the_fragment_and_its_warnings(tmp_path: Path) -> None:
    run_input, artefacts_file = _history_and_artefacts(tmp_path)
    from reasonwire.workers.io.replay_sources import read_artefact_file

    artefacts = read_artefact_file(artefacts_file)
    request = ReplayRequest(
        request_id="req-1", tenant="acme", target=ReplayTarget(grammar=Grammar.ANTHROPIC_MESSAGES, model=MODEL), history=run_input
    )
    parsed = parse_request(request.model_dump_json(by_alias=True).encode())
    assert parsed == request
    reply = reply_for(request, artefacts)
    assert reply.ok and reply.fragment == {"messages": expected_request_items(FIXTURE)}
    assert reply.counters["artefacts_replayed"] == 1


def test_a_replay_the_provider_would_reject_is_answered_not_ok(tmp_path: Path) -> None:
    run_input, _ = _history_and_artefacts(tmp_path)
    request = ReplayRequest(
        request_id="req-2", target=ReplayTarget(grammar=Grammar.ANTHROPIC_MESSAGES, model=MODEL), history=run_input
    )
    reply = reply_for(request, [])  # another tenant's thread: nothing stored for this one
    assert not reply.ok and reply.error is not None and reply.error.code == "provider_would_reject"
    assert reply.fragment is None


def test_a_request_that_breaks_the_contract_is_refused_with_its_id() -> None:
    reply = parse_request(b'{"request_id": "req-3", "target": {"grammar": "nope"}, "history": []}')
    assert isinstance(reply, ReplayReply) and not reply.ok
    assert reply.request_id == "req-3" and reply.error is not None and reply.error.code == "invalid_request"
    assert isinstance(parse_request(b"not json"), ReplayReply)


def test_replay_command_refuses_switching_into_gemini_3_mid_tool_loop_with_one_line_R8_P5(tmp_path: Path) -> None:
    """Anthropic history whose tool loop is open, replayed for Gemini 3: exit 1 ("provider would
    reject"), one line on stderr naming the call, no traceback, no fragment on stdout."""
    run_input, artefacts = _history_and_artefacts(tmp_path)
    done = _cli(
        "replay", "--provider", "gemini-generate-content", "--model", "gemini-3-flash-preview",
        "--artefacts", str(artefacts), "-", stdin=json.dumps(run_input).encode(),
    )
    assert done.returncode == 1
    assert done.stdout == b""
    errors = [line for line in done.stderr.decode().splitlines() if "tool-use turn" in line]
    assert len(errors) == 1 and "tool call" in errors[0] and "Traceback" not in done.stderr.decode()
