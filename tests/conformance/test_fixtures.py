"""Every fixture of every implemented grammar reproduces its expected.json facts (P9),
and every emitted stream is valid AG-UI (R1, R2) under ``--fail-on warning``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reasonwire.contracts.grammars import Grammar
from tests.conformance.oracle import assert_matches_expected, assert_valid_stream, fixture_paths, translate_file
from reasonwire.workers.translators import implemented

FIXTURES = [p for p in fixture_paths() if Grammar(p.parent.name) in implemented()]


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def _grammar(path: Path) -> str:
    return path.parent.name


def test_fixtures_are_found() -> None:
    assert len(fixture_paths()) >= 10, "no fixtures under tests/fixtures"


@pytest.mark.parametrize("grammar", list(Grammar), ids=lambda g: g.value)
def test_every_grammar_has_the_sample_streams_in_the_repository_P9(grammar: Grammar) -> None:
    """The two article cases `make run` publishes live in the repository, per grammar: a clone
    alone runs the demo and the tests (nothing is read from outside it)."""
    names = {p.stem for p in fixture_paths() if p.parent.name == grammar.value}
    assert {"a_reasoning_then_answer", "b_reasoning_then_tool_call"} <= names


@pytest.mark.parametrize("path", FIXTURES, ids=_id)
def test_fixture_facts_hold_P9_R3_P6(path: Path) -> None:
    expected = json.loads(path.with_suffix(".expected.json").read_text())
    request = expected.get("request") or {}
    # the worker gets the model from the rw-model header; Bedrock streams never name it
    out = translate_file(_grammar(path), path, model=request.get("model") or request.get("modelId"))
    assert_matches_expected(out, expected)


@pytest.mark.parametrize("path", FIXTURES, ids=_id)
def test_fixture_stream_is_valid_agui_R1_R2(path: Path) -> None:
    out = translate_file(_grammar(path), path)
    assert_valid_stream(out.events)


@pytest.mark.parametrize("path", FIXTURES, ids=_id)
def test_translation_is_deterministic(path: Path) -> None:
    """Same input, same output: what lets a worker that takes over a run re-feed it."""
    grammar = _grammar(path)
    first, second = translate_file(grammar, path), translate_file(grammar, path)
    assert first.events == second.events
    assert [a.model_dump() for a in first.artefacts] == [a.model_dump() for a in second.artefacts]


def test_every_grammar_has_a_translator() -> None:
    assert set(implemented()) == set(Grammar)
