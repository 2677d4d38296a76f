"""``reasonwire demo`` without services: which sample streams it publishes (all in the
repository) and how it shows stored artefacts (a table; never a value, P8)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from reasonwire.contracts.grammars import Grammar
from tests.conformance.oracle import LOCAL_FIXTURES, translate_file
from reasonwire.workers.commands.demo import SAMPLE_CASES, artefact_table, sample_streams

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_samples_are_the_packages_two_cases_per_grammar_the_repositorys_fixtures() -> None:
    root, streams = sample_streams(None)
    assert root.resolve() == (ROOT / "workers" / "commands" / "samples").resolve()  # package data: what a wheel carries
    assert sorted((p.parent.name, p.stem) for p in streams) == sorted((g.value, c) for g in Grammar for c in SAMPLE_CASES)
    for stream in streams:  # links, so the samples are the fixtures the conformance suite checks
        assert stream.read_bytes() == (LOCAL_FIXTURES / stream.parent.name / stream.name).read_bytes()


def test_a_named_folder_publishes_every_stream_of_each_grammar(tmp_path: Path) -> None:
    (tmp_path / "openai-responses").mkdir()
    (tmp_path / "openai-responses" / "mine.jsonl").write_text("{}\n")
    (tmp_path / "not-a-grammar").mkdir()
    (tmp_path / "not-a-grammar" / "x.jsonl").write_text("{}\n")
    assert sample_streams(str(tmp_path)) == (tmp_path, [tmp_path / "openai-responses" / "mine.jsonl"])
    assert sample_streams(str(tmp_path / "missing"))[1] == []


def test_artefacts_print_as_an_aligned_table_of_kind_entity_size_and_hash_never_the_value_P8() -> None:
    rows = []
    for grammar in ("anthropic-messages", "openai-responses"):
        path = LOCAL_FIXTURES / grammar / "b_reasoning_then_tool_call.jsonl"
        rows += [(f"{grammar}/b_reasoning_then_tool_call", record) for record in translate_file(grammar, path).artefacts]
    lines = artefact_table(rows)
    header, *body = lines
    assert header.split() == ["sample", "entity", "kind", "subtype", "bytes", "sha256", "complete"]
    assert len(body) == len(rows) == 2
    for line, (sample, record) in zip(body, rows, strict=True):
        assert record.value not in line and "{" not in line  # a table row, not a dict
        assert line.split() == [
            sample,
            record.entity_id,
            record.kind,
            record.subtype.value,
            str(len(record.value.encode())),
            hashlib.sha256(record.value.encode()).hexdigest()[:16],
            "yes",
        ]
    # aligned: every column starts at the same offset on every line
    for column in ("entity", "kind", "sha256"):
        start = header.index(column)
        assert all(line[start - 2 : start] == "  " and line[start] != " " for line in body)


def test_no_artefacts_is_said_not_left_blank() -> None:
    assert artefact_table([]) == ["(none)"]
