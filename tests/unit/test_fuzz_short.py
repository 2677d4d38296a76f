"""A short fixed-seed fuzz campaign: ``make fuzz`` in miniature, part of ``make test``.

Same mutations, same oracle, same seeds as the full campaign, a few thousand
input events per grammar: no exception escapes a translator or the worker's
serialization, the safety net never fires, every stream is valid AG-UI (R1, R2,
R7, AGUI2xx, usage ranges). A finding prints its signature and the minimized
case, ready to be filed under ``tests/fixtures/fuzz/``.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from fuzz.campaign import run_chunk
from fuzz.cases import case_to_json
from fuzz.corpus import GRAMMARS, Line
from fuzz.minimize import minimize
from fuzz.oracle import Case, run_case
from reasonwire.workers.translators.anthropic_messages import AnthropicMessagesTranslator

SEED = 20261201
EVENTS_PER_GRAMMAR = 4_000


@pytest.mark.parametrize("grammar", GRAMMARS)
def test_short_campaign_finds_nothing(grammar: str) -> None:
    tally = run_chunk((SEED, grammar, 0, EVENTS_PER_GRAMMAR))
    assert tally.events >= EVENTS_PER_GRAMMAR
    if tally.examples:
        sig, (finding, case) = sorted(tally.examples.items())[0]
        small = minimize(case, sig, budget=400)
        pytest.fail(f"{len(tally.examples)} finding(s); first {sig}: {finding.detail}\n{json.dumps(case_to_json(small))}")


def test_the_minimizer_shrinks_a_planted_bug_to_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug planted in the ping handler: the fuzzer sees the safety-net hit, and the
    minimizer reduces a whole fixture stream to the one event that triggers it."""

    def broken(self: object, obj: dict[str, object]) -> None:
        raise ValueError("planted")

    monkeypatch.setitem(AnthropicMessagesTranslator.HANDLERS, "ping", broken)
    stream = [
        Line(b'{"type":"message_start","message":{"id":"msg_1","model":"claude-sonnet-4-5","usage":{"input_tokens":2}}}'),
        Line(b'{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"hi"}}'),
        Line(b'{"type":"ping","extra":{"nested":[1,2,3]}}'),
        Line(b'{"type":"content_block_stop","index":0}'),
        Line(b'{"type":"message_stop"}'),
    ]
    case = Case("anthropic-messages", stream, model="claude-sonnet-4-5", end="both")
    [finding] = run_case(case).findings
    small = minimize(case, finding.signature)
    assert small.lines == [Line(b'{"type":"ping"}')]
    assert dataclasses.replace(small, lines=[]).end == "finish"
