"""`reasonwire translate`: JSONL and SSE input, artefact output, clear errors, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conformance.oracle import LOCAL_FIXTURES, assert_valid_stream

FIXTURE = LOCAL_FIXTURES / "anthropic-messages" / "a_reasoning_then_answer.jsonl"


def _translate(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "reasonwire.workers.cli", "translate", *args], input=stdin, capture_output=True, check=False
    )


def test_translates_jsonl_to_valid_agui_and_writes_artefacts_R3(tmp_path: Path) -> None:
    artefacts = tmp_path / "artefacts.jsonl"
    done = _translate("--provider", "anthropic-messages", "--artefacts", str(artefacts), str(FIXTURE))
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert_valid_stream(events)
    assert all("null" not in line.decode() for line in done.stdout.splitlines())  # 1.0 wire: no nulls
    [record] = [json.loads(line) for line in artefacts.read_text().splitlines()]
    expected = json.loads(FIXTURE.with_suffix(".expected.json").read_text())
    assert record["value"] == expected["opaque_artifacts"][0]["value"]
    assert record["schema"] == "reasonwire.artefact.v1"


def test_reads_a_raw_sse_capture_like_jsonl(tmp_path: Path) -> None:
    lines = FIXTURE.read_text().splitlines()
    sse = "".join(f"event: {json.loads(line)['type']}\ndata: {line}\n\n" for line in lines)
    from_sse = _translate("--provider", "anthropic-messages", "-", stdin=sse.encode())
    from_jsonl = _translate("--provider", "anthropic-messages", str(FIXTURE))
    assert from_sse.returncode == 0, from_sse.stderr
    assert from_sse.stdout == from_jsonl.stdout


def test_run_and_thread_ids_can_be_set() -> None:
    done = _translate("--provider", "anthropic-messages", "--run-id", "R", "--thread-id", "T", str(FIXTURE))
    first = json.loads(done.stdout.splitlines()[0])
    assert (first["runId"], first["threadId"]) == ("R", "T")


def test_malformed_line_is_named_with_nonzero_exit_and_no_traceback_R7() -> None:
    lines = FIXTURE.read_bytes().splitlines()
    lines[2] = b"this is not json"
    done = _translate("--provider", "anthropic-messages", "-", stdin=b"\n".join(lines))
    assert done.returncode == 1
    assert b"input line 3" in done.stderr and b"Traceback" not in done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["type"] == "RUN_ERROR"


def test_missing_file_and_non_utf8_are_clear_errors() -> None:
    missing = _translate("--provider", "anthropic-messages", "/nonexistent/capture.jsonl")
    assert missing.returncode == 2 and b"cannot read" in missing.stderr and b"Traceback" not in missing.stderr
    binary = _translate("--provider", "anthropic-messages", "-", stdin=b"\xff\xfe\x00garbage")
    assert binary.returncode == 2 and b"not UTF-8" in binary.stderr and b"Traceback" not in binary.stderr


def test_unknown_grammar_is_refused() -> None:
    done = _translate("--provider", "smoke-signals", str(FIXTURE))
    assert done.returncode == 2 and b"invalid choice" in done.stderr


def test_warnings_carry_no_content_P8() -> None:
    lines = FIXTURE.read_bytes().splitlines()
    lines.insert(2, b'{"type": "mystery", "secret": "EpQDCkgIBhAB"}')
    done = _translate("--provider", "anthropic-messages", "-", stdin=b"\n".join(lines))
    assert done.returncode == 0
    assert b"unknown anthropic-messages event type 'mystery'" in done.stderr
    assert b"EpQDCkgIBhAB" not in done.stderr


# -- reading captures: a BOM, events as their lines arrive ---------------------------------


def test_translate_reads_a_capture_with_a_utf8_bom(tmp_path: Path) -> None:
    """Editors on Windows save UTF-8 with a byte-order mark; it is not part of the first event."""
    from tests.unit.test_cli_errors import STREAM

    capture = tmp_path / "bom.jsonl"
    capture.write_bytes(b"\xef\xbb\xbf" + STREAM)
    plain = _translate("--provider", "anthropic-messages", "-", stdin=STREAM)
    for done in (_translate("--provider", "anthropic-messages", str(capture)), _translate("--provider", "anthropic-messages", "-", stdin=b"\xef\xbb\xbf" + STREAM)):
        assert done.returncode == 0, done.stderr
        assert done.stdout == plain.stdout
        assert json.loads(done.stdout.splitlines()[-1])["type"] == "RUN_FINISHED"


def test_translate_emits_each_event_as_its_line_arrives() -> None:
    """`… | reasonwire translate` follows a live stream: the output of a line is readable before
    the next line is written (stdin still open), within a timeout."""
    import select

    from tests.unit.test_cli_errors import STREAM, reasonwire

    lines = STREAM.split(b"\n")
    proc = subprocess.Popen([*reasonwire(), "translate", "--provider", "anthropic-messages", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        seen: list[str] = []
        for line, expected in [(lines[0], "RUN_STARTED"), (lines[1], "REASONING_START")]:  # each line's first output
            proc.stdin.write(line + b"\n")
            proc.stdin.flush()
            assert select.select([proc.stdout], [], [], 30)[0], f"no output for {expected} while stdin is open"
            seen.append(json.loads(proc.stdout.readline())["type"])
            assert seen[-1] == expected
        proc.stdin.write(b"\n".join(lines[2:]) + b"\n")
        proc.stdin.close()
        rest = proc.stdout.read()
        assert proc.wait(30) == 0
    finally:
        proc.kill()
    assert json.loads(rest.splitlines()[-1])["type"] == "RUN_FINISHED"


def test_translate_follows_a_live_sse_capture_too() -> None:
    """Raw SSE (`event:` / `data:` / blank line): an event is emitted once its blank line arrives."""
    import select

    from tests.unit.test_cli_errors import STREAM, reasonwire

    frames = [f"event: {json.loads(line)['type']}\ndata: {line.decode()}\n\n".encode() for line in STREAM.split(b"\n")]
    proc = subprocess.Popen([*reasonwire(), "translate", "--provider", "anthropic-messages", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(frames[0])
        proc.stdin.flush()
        assert select.select([proc.stdout], [], [], 30)[0], "no output for the first SSE event while stdin is open"
        assert json.loads(proc.stdout.readline())["type"] == "RUN_STARTED"
        proc.stdin.write(b"".join(frames[1:]))
        proc.stdin.close()
        rest = proc.stdout.read()
        assert proc.wait(30) == 0
    finally:
        proc.kill()
    assert json.loads(rest.splitlines()[-1])["type"] == "RUN_FINISHED"
