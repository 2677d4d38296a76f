"""The pure parts of the gateway's client handling: a follow that waited still delivers the
tail, bounded pieces, the id grammar, the grammar gate, the framer's size limit, the write budget."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from reasonwire.contracts.ids import BadId, check_id
from reasonwire.workers.services.gateway.app import ByteBudget
from reasonwire.workers.services.gateway.fanout import RunLog
from reasonwire.workers.services.ingress.records import EventTooLarge, SSEFramer
from reasonwire.workers.services.ingress.recognition import NO_EVENTS, GrammarGate, NotThisGrammar, gate_for
from reasonwire.workers.io.sse import ProviderEvent

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _blob(kind: str, **fields: object) -> bytes:
    return orjson.dumps({"type": kind, **fields})


async def test_a_follow_resumed_after_the_run_ended_still_yields_the_tail() -> None:
    """Today's main returned when a resumed write found the run ended, dropping what came meanwhile."""
    log = RunLog("acme", "t1")
    log.add(0, _blob("RUN_STARTED"))
    follow = log.follow(-1, keepalive_s=5, chunk_bytes=4096)
    first = await anext(follow)  # the write of this piece "waits" while the rest arrives
    for seq in range(1, 50):
        log.add(seq, _blob("TEXT_MESSAGE_CONTENT", delta="x" * 200))
    log.add(50, _blob("RUN_FINISHED"))
    rest = [piece async for piece in follow]
    body = first + b"".join(rest)
    assert body == b"".join(log.frames)
    assert all(len(piece) <= 4096 for piece in rest)  # bounded pieces, never the run joined


async def test_a_frame_larger_than_a_piece_is_cut_into_pieces() -> None:
    log = RunLog("acme", "t1")
    log.add(0, _blob("RUN_STARTED", pad="y" * 10_000))
    log.add(1, _blob("RUN_FINISHED"))
    pieces = [piece async for piece in log.follow(-1, keepalive_s=5, chunk_bytes=4096)]
    assert b"".join(pieces) == b"".join(log.frames) and max(map(len, pieces)) <= 4096


async def test_the_write_budget_waits_for_room_and_times_out() -> None:
    budget = ByteBudget(100)
    assert await budget.acquire(80, 1)
    assert not await budget.acquire(40, 0.05)
    asyncio.get_running_loop().call_later(0.05, budget.release, 80)
    assert await budget.acquire(40, 1) and budget.used == 40


@pytest.mark.parametrize("bad", ["a/b", "..", ".", "../x", "r-ü", "has space", "", "x" * 129, "-lead", "a%2Fb", "a\nb"])
def test_ids_outside_the_grammar_are_refused(bad: str) -> None:
    with pytest.raises(BadId, match="A-Z a-z 0-9"):
        check_id("run id", bad)


@pytest.mark.parametrize("good", ["r1", "resp_0a1b", "msg_01XyZ", "0b6a3c1e-8d0f-4c9e-9d7a-2f8e4b1c7a55", "_x", "a:b@c~d.e-f", "x" * 128])
def test_ordinary_ids_fit_the_grammar(good: str) -> None:
    assert check_id("run id", good) == good


def _events(path: Path) -> list[ProviderEvent]:
    from reasonwire.workers.io.sse import read_events

    with path.open(encoding="utf-8") as f:
        return list(read_events(f))


def test_the_gate_holds_until_recognised_and_refuses_another_grammar() -> None:
    anthropic = _events(FIXTURES / "anthropic-messages" / "c_interleaved_thinking_tool_calls.jsonl")
    openai = _events(FIXTURES / "openai-responses" / "c_interleaved_reasoning_tool_calls.jsonl")
    gate: GrammarGate[int] | None = gate_for("anthropic-messages")
    assert gate is not None
    out = [item for n, e in enumerate(anthropic) for _, item in gate.feed(e, n)] + [item for _, item in gate.finish()]
    assert out == list(range(len(anthropic)))  # a real stream goes out whole and in order
    wrong: GrammarGate[int] | None = gate_for("anthropic-messages")
    assert wrong is not None
    with pytest.raises(NotThisGrammar, match="this is not an anthropic-messages stream .*it reads as openai-responses"):
        for n, e in enumerate(openai):
            assert wrong.feed(e, n) == []  # nothing released before recognition
        wrong.finish()
    empty: GrammarGate[int] | None = gate_for("anthropic-messages")
    assert empty is not None
    with pytest.raises(NotThisGrammar, match=NO_EVENTS):
        empty.finish()


def test_the_framer_refuses_a_long_line_while_it_is_still_arriving() -> None:
    framer = SSEFramer(max_event_bytes=1000)
    framer.feed(b"data: " + b"x" * 900)
    with pytest.raises(EventTooLarge) as caught:
        framer.feed(b"x" * 200)  # no newline yet: refused without waiting for the rest
    assert caught.value.limit == 1000
    ok = SSEFramer(max_event_bytes=1000)
    assert ok.feed(b"data: " + b"x" * 1000 + b"\n\n") == [(b"x" * 1000, None)]
