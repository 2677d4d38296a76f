"""The fixture oracle: compare a translator's output with a fixture's ``expected.json``.

The oracle is an independent statement of the facts (written from the provider's
documented grammar, not from our output). This module reads *our* AG-UI stream
back into the same vocabulary — reasoning messages, opaque artefacts, tool
calls, text messages, ordering, usage, end — and asserts each fact. Our ids are
not the fixture's refs; the two are paired through ``ordering`` (the order in
which units start), which is itself a fact under test.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ag_ui.core import Event
from ag_ui_validate.pytest_plugin import assert_valid_agui
from pydantic import TypeAdapter

from reasonwire.contracts.artefacts import ArtefactRecord
from reasonwire.workers.core.translator import Translator, TranslatorWarning
from reasonwire.workers.core.wire import event_json
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.translators import translator_for

LOCAL_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
"""Every sample stream the tests and ``make run`` read: ``<grammar>/<case>.jsonl`` beside its
``expected.json``, all inside the repository (a bare clone has everything)."""

_EVENT = TypeAdapter(Event)


@dataclass
class Output:
    """Everything one translated stream produced, on the wire."""

    events: list[dict[str, Any]]
    artefacts: list[ArtefactRecord]
    warnings: list[TranslatorWarning]
    rejected_lines: list[int]
    translator: Translator


def fixture_paths() -> list[Path]:
    """Every ``*.jsonl`` fixture that has an ``expected.json``."""
    return sorted(p for p in LOCAL_FIXTURES.glob("*/*.jsonl") if p.with_suffix(".expected.json").exists())


def translate_lines(grammar: str, lines: list[bytes], **kwargs: Any) -> Output:
    """Feed raw provider events one at a time, then ``finish()``; wire-encode the events."""
    translator = translator_for(grammar, **kwargs)
    events, artefacts, warnings, rejected = [], [], [], []
    for raw in lines:
        out = translator.feed(raw)
        events += out.events
        artefacts += out.artefacts
        warnings += out.warnings
        if out.rejection is not None:
            rejected.append(out.rejection.line)
    out = translator.finish()
    events += out.events
    artefacts += out.artefacts
    warnings += out.warnings
    wire = [json.loads(event_json(e)) for e in events]
    return Output(wire, artefacts, warnings, rejected, translator)


def translate_file(grammar: str, path: Path, **kwargs: Any) -> Output:
    with path.open(encoding="utf-8") as f:
        return translate_lines(grammar, [e.data for e in read_events(f)], **kwargs)


def of_type(out: Output, kind: str) -> list[dict[str, Any]]:
    """The events of one AG-UI type, in stream order."""
    return [e for e in out.events if e["type"] == kind]


def types(out: Output) -> list[str]:
    """The stream's event types, in order."""
    return [e["type"] for e in out.events]


def assert_valid_stream(events: list[dict[str, Any]]) -> None:
    """The stream parses with the ag-ui-protocol models and passes ag-ui-validate
    with warnings treated as failures (``--fail-on warning``)."""
    for event in events:
        _EVENT.validate_python(event)
    assert_valid_agui(events, max_warnings=0)


# -- reading our stream back into facts ---------------------------------------------


@dataclass
class Facts:
    reasoning: dict[str, dict[str, Any]] = field(default_factory=dict)
    texts: dict[str, dict[str, Any]] = field(default_factory=dict)
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    encrypted: list[dict[str, Any]] = field(default_factory=list)
    ordering: list[tuple[str, str]] = field(default_factory=list)
    terminal: dict[str, Any] = field(default_factory=dict)


def facts(events: list[dict[str, Any]]) -> Facts:
    f = Facts()
    for e in events:
        kind = e["type"]
        meta = (e.get("metadata") or {}).get("reasonwire", {})
        if kind == "REASONING_MESSAGE_START":
            f.reasoning[e["messageId"]] = {"text": "", "kind": meta.get("reasoningKind"), "complete": None}
            f.ordering.append(("reasoning", e["messageId"]))
        elif kind == "REASONING_MESSAGE_CONTENT":
            f.reasoning[e["messageId"]]["text"] += e["delta"]
        elif kind == "REASONING_MESSAGE_END":
            f.reasoning[e["messageId"]]["complete"] = not meta.get("incomplete", False)
        elif kind == "TEXT_MESSAGE_START":
            f.texts[e["messageId"]] = {"text": "", "complete": None}
            f.ordering.append(("text", e["messageId"]))
        elif kind == "TEXT_MESSAGE_CONTENT":
            f.texts[e["messageId"]]["text"] += e["delta"]
        elif kind == "TEXT_MESSAGE_END":
            f.texts[e["messageId"]]["complete"] = not meta.get("incomplete", False)
        elif kind == "TOOL_CALL_START":
            f.tools[e["toolCallId"]] = {"name": e["toolCallName"], "arguments": "", "complete": False}
            f.ordering.append(("tool_call", e["toolCallId"]))
        elif kind == "TOOL_CALL_ARGS":
            f.tools[e["toolCallId"]]["arguments"] += e["delta"]
        elif kind == "TOOL_CALL_END":
            f.tools[e["toolCallId"]]["complete"] = not meta.get("incomplete", False)
        elif kind == "REASONING_ENCRYPTED_VALUE":
            f.encrypted.append(e)
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            f.terminal = e
    return f


# -- the assertions ------------------------------------------------------------------


def assert_matches_expected(out: Output, expected: dict[str, Any]) -> None:
    """Every fact of ``expected.json`` holds for ``out``."""
    got = facts(out.events)
    ids = _pair_refs(got, expected)
    _check_reasoning(got, expected, ids)
    _check_artefacts(got, out, expected, ids)
    _check_tools(got, expected, ids)
    _check_texts(got, expected, ids)
    _check_end(got, expected)
    _check_usage(got, expected)
    _check_unknown(out, expected)


def _check_unknown(out: Output, expected: dict[str, Any]) -> None:
    """P3: every unknown event is reported (by line where the fixture names lines), nothing else."""
    unknown = [w for w in out.warnings if w.code.startswith("unknown")]
    want = expected.get("unknown_lines", [])
    if all(isinstance(line, int) for line in want):
        assert [w.line for w in unknown] == want, (unknown, want)
    else:
        assert len(unknown) == len(want), (unknown, want)


def _pair_refs(got: Facts, expected: dict[str, Any]) -> dict[str, str]:
    want = [tuple(entry.split(":", 1)) for entry in expected["ordering"]]
    assert [k for k, _ in got.ordering] == [k for k, _ in want], (got.ordering, want)
    return {ref: our_id for (_, ref), (_, our_id) in zip(want, got.ordering, strict=True)}


def _check_reasoning(got: Facts, expected: dict[str, Any], ids: dict[str, str]) -> None:
    assert len(got.reasoning) == len(expected["reasoning_messages"])
    for rm in expected["reasoning_messages"]:
        ours = got.reasoning[ids[rm["ref"]]]
        assert ours["text"] == (rm.get("text") or ""), rm["ref"]
        if rm["kind"] in ("summary", "raw", "redacted"):
            assert ours["kind"] == rm["kind"], (rm["ref"], ours["kind"])
        assert ours["complete"] == rm["complete"], rm["ref"]


def _check_artefacts(got: Facts, out: Output, expected: dict[str, Any], ids: dict[str, str]) -> None:
    """R3: every opaque value byte for byte, on the entity it belongs to, once. Readable replay state
    (``"announced": false``: DeepSeek's ``reasoning_content``, an OpenRouter summary) is stored like an
    opaque value and never announced as ``REASONING_ENCRYPTED_VALUE``."""
    announced = [a for a in expected["opaque_artifacts"] if a.get("complete", True) and a.get("announced", True)]
    assert len(got.encrypted) == len(announced), (len(got.encrypted), len(announced))
    for ev, art in zip(got.encrypted, announced, strict=True):
        assert ev["encryptedValue"] == art["value"]
        assert ev["subtype"] == art["ag_ui"]["subtype"]
        assert ev["entityId"] == ids[art["ag_ui"]["entity_ref"]]
    values = [r.value for r in out.artefacts]
    assert values == [a["value"] for a in expected["opaque_artifacts"]]
    for record, art in zip(out.artefacts, expected["opaque_artifacts"], strict=True):
        assert record.complete == art.get("complete", True)
        # the issuer names the grammar by its folder name ("bedrock-converse"), whatever the fixture's provider field says
        assert record.issuer.grammar is out.translator.grammar
        if "issuer_provider" in art:  # grammars many providers speak: the provider that issued it (R8)
            assert record.kind == art["kind"], (record.kind, art["kind"])
            assert record.issuer.provider == art["issuer_provider"], (record.issuer.provider, art["issuer_provider"])
            assert record.entity_id == ids[art["ag_ui"]["entity_ref"]]
        native = art.get("native")
        if native is not None:
            assert record.native.block == native["block"], (record.native.block, native["block"])
            assert record.native.value_path == native["value_path"]
            assert record.native.position == native["position"]


def _check_tools(got: Facts, expected: dict[str, Any], ids: dict[str, str]) -> None:
    assert len(got.tools) == len(expected["tool_calls"])
    tool_refs = [ref for kind, ref in (e.split(":", 1) for e in expected["ordering"]) if kind == "tool_call"]
    for call, ref in zip(expected["tool_calls"], tool_refs, strict=True):
        our_id = ids[ref]
        if call.get("id"):
            assert our_id == call["id"]
        ours = got.tools[our_id]
        assert ours["name"] == call["name"]
        if call.get("complete", True):
            assert ours["arguments"] == call["arguments"] or json.loads(ours["arguments"]) == json.loads(call["arguments"])
            assert ours["complete"]


def _check_texts(got: Facts, expected: dict[str, Any], ids: dict[str, str]) -> None:
    assert len(got.texts) == len(expected["text_messages"])
    for tm in expected["text_messages"]:
        assert got.texts[ids[tm["ref"]]]["text"] == tm["text"]
    if expected.get("final_answer_text") is not None and expected["text_messages"]:
        assert expected["final_answer_text"] in "".join(t["text"] for t in got.texts.values())


def _check_end(got: Facts, expected: dict[str, Any]) -> None:
    kind = expected["end"]["kind"]
    terminal = got.terminal
    if kind == "finished":
        assert terminal["type"] == "RUN_FINISHED", terminal
    else:
        assert terminal["type"] == "RUN_ERROR", terminal
        wanted = "interrupted" if kind == "interrupted" else ("provider_error", "malformed_event")
        assert terminal.get("code") in wanted if isinstance(wanted, tuple) else terminal.get("code") == wanted


def _check_usage(got: Facts, expected: dict[str, Any]) -> None:
    """P6: counts as the provider reported them; reasoning unset (not 0) when unreported."""
    usage = expected.get("usage")
    reported = (got.terminal.get("usage") or [None])[0]
    if not usage or usage.get("input_tokens") is None and usage.get("output_tokens") is None:
        return
    assert reported is not None, "usage missing from the terminal event"
    for ours, theirs in (
        ("inputTokens", "input_tokens"),
        ("outputTokens", "output_tokens"),
        ("reasoningTokens", "reasoning_tokens"),
        ("totalTokens", "total_tokens"),
        ("cachedInputTokens", "cached_input_tokens"),
    ):
        if theirs in usage:
            assert reported.get(ours) == usage[theirs], (ours, reported.get(ours), usage[theirs])
