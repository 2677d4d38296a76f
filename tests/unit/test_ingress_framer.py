"""The ingress framer: a live SSE / JSONL stream → one raw record per provider event, bytes unchanged."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from reasonwire.workers.services.ingress.records import SSEFramer
from reasonwire.workers.io.sse import read_events

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl"


def _as_sse(payloads: list[bytes]) -> bytes:
    return b"".join(b"event: e%d\ndata: %s\n\n" % (i, p) for i, p in enumerate(payloads))


def test_sse_lines_give_one_event_per_frame_with_its_name() -> None:
    framer = SSEFramer()
    out = [e for line in [b"event: message_start", b'data: {"a":1}', b"", b": keep-alive", b'data: {"b":2}', b""] for e in framer.line(line)]
    assert out == [(b'{"a":1}', "message_start"), (b'{"b":2}', None)]


def test_bare_payload_lines_are_one_event_each_and_done_is_not_an_event() -> None:
    framer = SSEFramer()
    out = [e for line in [b'{"x":1}', b'{"y":2}\r', b"data: [DONE]", b""] for e in framer.line(line)]
    assert out == [(b'{"x":1}', None), (b'{"y":2}', None)]


def test_multiline_data_joined_and_unterminated_last_frame_flushed_at_finish() -> None:
    framer = SSEFramer()
    assert framer.feed(b"data: one\ndata: two\n\ndata: last") == [(b"one\ntwo", None)]
    assert framer.finish() == [(b"last", None)]


def test_data_lines_without_blank_lines_split_at_the_next_event_field() -> None:
    framer = SSEFramer()
    out = [e for line in [b"event: a", b"data: 1", b"event: b", b"data: 2"] for e in framer.line(line)] + framer.finish()
    assert out == [(b"1", "a"), (b"2", "b")]


@given(st.lists(st.integers(min_value=1, max_value=97), max_size=40))
def test_any_chunking_of_a_capture_gives_the_same_events_as_the_offline_reader(cuts: list[int]) -> None:
    """Records go out as the body arrives, whatever the chunk boundaries (HTTP ingress)."""
    lines = FIXTURE.read_text().splitlines()
    body = _as_sse([line.encode() for line in lines])
    expected = [(e.data, e.sse_event) for e in read_events(body.decode().splitlines(keepends=True))]
    framer, out, at = SSEFramer(), [], 0
    for cut in cuts:
        out += framer.feed(body[at : at + cut])
        at += cut
    out += framer.feed(body[at:]) + framer.finish()
    assert out == expected
