"""The Chat Completions reasoning grammar: providers, issuers, replay state, framings, abnormal ends.

The fixture facts (tests/fixtures/openai-chat-completions/*.expected.json) are checked by the
conformance suite; these tests state the rules a fixture cannot: the producer's stated provider
against the fallback, readable replay state never announced nor shown to the public audience,
NDJSON and SSE framings giving the same events, and the malformed shapes (R7).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from reasonwire.contracts import topics
from reasonwire.contracts.envelope import HEADER_ISSUER_PROVIDER, read_envelope
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.issuers import keeps_readable_reasoning, provider_from_model, provider_from_stream
from reasonwire.contracts.policy import AudienceRule, ReasoningVisibility
from reasonwire.workers.core.audience import AudienceFilter
from reasonwire.workers.core.normalizer import Normalizer, RawRecord, RunInput
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.services.ingress.records import RunEnvelope, SSEFramer, raw_records
from reasonwire.workers.services.ingress.recognition import NotThisGrammar, check_events
from reasonwire.workers.translators import translator_for
from tests.conformance.oracle import LOCAL_FIXTURES, Output, assert_valid_stream, of_type, translate_file, translate_lines

GRAMMAR = "openai-chat-completions"
FIXTURES = LOCAL_FIXTURES / GRAMMAR


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, *, model: str = "deepseek-v4-pro", usage: Any = None) -> bytes:
    obj: dict[str, Any] = {
        "id": "cmpl-1",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }
    if usage is not None:
        obj["usage"] = usage
    return orjson.dumps(obj)


def _turn(field: str, pieces: list[str], *, model: str = "deepseek-v4-pro", finish: str = "stop") -> list[bytes]:
    return [*(_chunk({field: p}, model=model) for p in pieces), _chunk({"content": "ok"}, model=model), _chunk(None, finish, model=model)]


def _readable(out: Output) -> list[Any]:
    return [a for a in out.artefacts if a.kind.endswith(".reasoning_content")]


# -- the issuer: stated, or the documented fallback ------------------------------------------------


def test_a_stated_provider_wins_over_the_model_name_R8() -> None:
    """``rw-issuer-provider`` is the producer's word: a vLLM-served R1 declared ``deepseek`` keeps
    its reasoning; the same stream declared ``vllm`` keeps nothing."""
    lines = _turn("reasoning", ["think ", "hard"], model="deepseek-ai/DeepSeek-R1")
    [kept] = _readable(translate_lines(GRAMMAR, lines, issuer_provider="deepseek"))
    assert (kept.kind, kept.issuer.provider, kept.value) == ("deepseek.reasoning_content", "deepseek", "think hard")
    assert _readable(translate_lines(GRAMMAR, lines, issuer_provider="vllm")) == []


@pytest.mark.parametrize(
    ("model", "field", "provider"),
    [
        ("deepseek-v4-pro", "reasoning_content", "deepseek"),
        ("deepseek-r1", "reasoning", None),  # a served name on vLLM: not DeepSeek's API
        ("glm-4.6", "reasoning_content", "glm"),
        ("kimi-k2-thinking", "reasoning_content", "kimi"),
        ("qwen3-235b-a22b", "reasoning_content", "qwen"),
        ("magistral-small-2509", "thinking", "mistral"),
        ("deepseek-ai/DeepSeek-V3.2", "reasoning_content", None),  # whose weights, not whose API
        ("llama-3.3-70b", "reasoning", None),
    ],
)
def test_the_fallback_provider_comes_from_the_vendor_model_name_and_the_field_R8(model: str, field: str, provider: str | None) -> None:
    assert provider_from_stream(model=model, reasoning_field=field, openrouter=False, ollama=False) == provider


def test_ollama_and_openrouter_streams_name_their_provider_without_help() -> None:
    assert provider_from_stream(model="qwen3:8b", reasoning_field="thinking", openrouter=False, ollama=True) == "ollama:qwen3:8b"
    assert provider_from_stream(model="deepseek/deepseek-r1", reasoning_field="reasoning", openrouter=True, ollama=False) == "openrouter"
    assert provider_from_model("DeepSeek-Chat") == "deepseek" and provider_from_model(None) is None
    assert keeps_readable_reasoning("glm") and not keeps_readable_reasoning("ollama:qwen3") and not keeps_readable_reasoning(None)


# -- readable replay state --------------------------------------------------------------------------


def test_deepseek_reasoning_content_is_kept_byte_for_byte_and_never_announced_R3_P8() -> None:
    """The whole text of the turn, joined from every delta — a character cut between its UTF-16
    halves included — is one record on the first reasoning message; no REASONING_ENCRYPTED_VALUE
    carries it (it is not encrypted; its text already went out as reasoning events)."""
    lines = [
        _chunk({"role": "assistant", "content": None, "reasoning_content": ""}),
        _chunk({"reasoning_content": "Hm  \n"}),
        b'{"id":"cmpl-1","object":"chat.completion.chunk","model":"deepseek-v4-pro","choices":[{"index":0,"delta":{"reasoning_content":"\\ud83d"}}]}',
        b'{"id":"cmpl-1","object":"chat.completion.chunk","model":"deepseek-v4-pro","choices":[{"index":0,"delta":{"reasoning_content":"\\ude00 \\"q\\""}}]}',
        _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
        _chunk(None, "tool_calls"),
    ]
    out = translate_lines(GRAMMAR, lines)
    [kept] = out.artefacts
    assert kept.value == 'Hm  \n😀 "q"' and kept.complete
    assert kept.entity_id == of_type(out, "REASONING_MESSAGE_START")[0]["messageId"]
    assert kept.native.block == {"role": "assistant"} and kept.native.value_path == ["reasoning_content"]
    assert kept.provider_block() == {"role": "assistant", "reasoning_content": 'Hm  \n😀 "q"'}
    assert kept.native.extra["tool_call_ids"] == ["call_1"]
    assert (kept.issuer.grammar, kept.issuer.model, kept.issuer.provider) == (Grammar.OPENAI_CHAT_COMPLETIONS, "deepseek-v4-pro", "deepseek")
    assert of_type(out, "REASONING_ENCRYPTED_VALUE") == []
    assert "Hm" not in repr(kept) and "Hm" not in str(kept.describe())  # P8: logs see kind, size, hash
    assert_valid_stream(out.events)


def test_a_public_audience_sees_no_raw_reasoning_and_no_replay_state_P1_P7() -> None:
    out = translate_file(GRAMMAR, FIXTURES / "b_reasoning_then_tool_call.jsonl", model="deepseek-v4-pro")
    public = AudienceFilter(AudienceRule(reasoning=ReasoningVisibility.SUMMARY, encrypted_values=False))
    kept = [e for e in (public.admit(e) for e in out.events) if e is not None]
    text = _readable(out)[0].value
    assert not any(e["type"].startswith("REASONING_MESSAGE") for e in kept)
    assert text[:30] not in json.dumps(kept)
    assert_valid_stream(kept)


def test_interrupted_turn_keeps_its_reasoning_incomplete_never_replayable_P5() -> None:
    out = translate_lines(GRAMMAR, [_chunk({"reasoning_content": "half a thou"})])
    [kept] = out.artefacts
    assert kept.value == "half a thou" and not kept.complete
    assert out.events[-1]["type"] == "RUN_ERROR" and out.events[-1]["code"] == "interrupted"


def test_providers_that_need_nothing_back_store_nothing() -> None:
    """vLLM-served R1, Qwen3, Ollama, Mistral: their readable reasoning is shown, never stored."""
    for name in ("d_vllm_reasoning_field", "e_sglang_usage", "g_mistral_thinking_chunks", "h_ollama_ndjson"):
        out = translate_file(GRAMMAR, FIXTURES / f"{name}.jsonl")
        assert out.artefacts == [], name
        assert of_type(out, "REASONING_MESSAGE_CONTENT"), name


def test_openrouter_items_each_name_their_own_issuer_and_keep_index_order_R8() -> None:
    out = translate_file(GRAMMAR, FIXTURES / "f_openrouter_reasoning_details.jsonl")
    assert [(a.kind, a.native.position, a.issuer.provider) for a in out.artefacts] == [
        ("openrouter.reasoning.text", 0, "openrouter:anthropic-claude-v1"),
        ("openrouter.reasoning.encrypted", 1, "openrouter:anthropic-claude-v1"),
    ]
    text, encrypted = (a.provider_block() for a in out.artefacts)
    assert text["signature"] and text["text"].startswith("The user asks") and encrypted["data"]
    shown = "".join(e["delta"] for e in of_type(out, "REASONING_MESSAGE_CONTENT"))
    assert shown == text["text"]  # delta.reasoning and the reasoning.text fragments: shown once


def test_openrouter_items_out_of_order_are_kept_by_index() -> None:
    def details(*items: dict[str, Any]) -> bytes:
        return _chunk({"reasoning_details": list(items)}, model="openai/gpt-5")

    lines = [
        details({"type": "reasoning.encrypted", "data": "ZW5j", "index": 1, "format": "openai-responses-v1"}),
        details({"type": "reasoning.summary", "summary": "sum", "index": 0, "format": "openai-responses-v1"}),
        _chunk({"content": "answer"}, model="openai/gpt-5"),
        _chunk(None, "stop", model="openai/gpt-5"),
    ]
    out = translate_lines(GRAMMAR, lines)
    assert [(a.kind, a.value, a.native.position) for a in out.artefacts] == [
        ("openrouter.reasoning.summary", "sum", 0),
        ("openrouter.reasoning.encrypted", "ZW5j", 1),
    ]
    assert [e["encryptedValue"] for e in of_type(out, "REASONING_ENCRYPTED_VALUE")] == ["ZW5j"]  # the summary is readable
    assert_valid_stream(out.events)


def test_encrypted_only_openrouter_reasoning_gets_a_carrier_message() -> None:
    lines = [
        _chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "b3BhcXVl", "index": 0, "format": "xai-responses-v1"}]}, model="x-ai/grok-4"),
        _chunk({"content": "hi"}, model="x-ai/grok-4"),
        _chunk(None, "stop", model="x-ai/grok-4"),
    ]
    out = translate_lines(GRAMMAR, lines)
    [start] = of_type(out, "REASONING_MESSAGE_START")
    assert start["metadata"]["reasonwire"]["reasoningKind"] == "none"
    [value] = of_type(out, "REASONING_ENCRYPTED_VALUE")
    assert value["entityId"] == start["messageId"] and out.artefacts[0].issuer.provider == "openrouter:xai-responses-v1"
    assert_valid_stream(out.events)


# -- ends --------------------------------------------------------------------------------------------


def test_usage_trailer_after_finish_reason_is_on_run_finished_P6() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17, "completion_tokens_details": {"reasoning_tokens": 5}}
    lines = [*_turn("reasoning_content", ["a"]), _chunk(None, usage=usage).replace(b'"choices":[{"index":0,"delta":{},"finish_reason":null}]', b'"choices":[]')]
    out = translate_lines(GRAMMAR, lines)
    [finished] = of_type(out, "RUN_FINISHED")
    assert finished["usage"][0]["reasoningTokens"] == 5 and finished["usage"][0]["provider"] == "deepseek"


def test_content_filter_finishes_with_what_was_open_marked_incomplete() -> None:
    out = translate_lines(GRAMMAR, [_chunk({"content": "Once upon"}), _chunk(None, "content_filter")])
    assert out.events[-1]["type"] == "RUN_FINISHED" and out.events[-1]["metadata"]["reasonwire"]["stopReason"] == "content_filter"
    assert of_type(out, "TEXT_MESSAGE_END")[0]["metadata"]["reasonwire"]["incomplete"] is True


def test_length_inside_tool_arguments_ends_with_incomplete_tool_call() -> None:
    lines = [
        _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": '}}]}),
        _chunk(None, "length"),
    ]
    out = translate_lines(GRAMMAR, lines)
    assert out.events[-1]["type"] == "RUN_ERROR" and out.events[-1]["code"] == "incomplete_tool_call"
    assert_valid_stream(out.events)


@pytest.mark.parametrize(
    "error",
    [
        {"error": {"message": "overloaded", "type": "server_error", "code": "overloaded"}},
        {"object": "error", "message": "bad request", "type": "BadRequestError", "code": 400},
        {"error": "model 'qwen3' not found"},
    ],
    ids=["openai-compatible", "vllm", "ollama"],
)
def test_an_error_object_ends_the_run_with_provider_error_R1(error: dict[str, Any]) -> None:
    out = translate_lines(GRAMMAR, [_chunk({"reasoning_content": "a"}), orjson.dumps(error)])
    assert out.events[-1]["type"] == "RUN_ERROR" and out.events[-1]["code"] == "provider_error"
    assert_valid_stream(out.events)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (_chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": 3}}]}), "arguments"),
        (_chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"arguments": "{}"}}]}), "name"),
        (_chunk({"reasoning_content": 7}), "reasoning_content"),
        (_chunk({"content": {"text": "x"}}), "content"),
        (_chunk({"reasoning_details": [{"type": "reasoning.text", "text": "a", "index": -1}]}), "index"),
    ],
    ids=["arguments-not-a-string", "call-without-name", "reasoning-not-a-string", "content-object", "negative-index"],
)
def test_a_malformed_known_chunk_ends_the_run_and_is_dead_lettered_R7(line: bytes, reason: str) -> None:
    out = translate_lines(GRAMMAR, [_chunk({"reasoning_content": "a"}), line])
    assert out.rejected_lines == [2]
    assert out.events[-1]["code"] == "malformed_event" and reason in out.events[-1]["message"]
    assert_valid_stream(out.events)


def test_a_delta_after_finish_reason_is_malformed_R7() -> None:
    out = translate_lines(GRAMMAR, [_chunk({"content": "a"}), _chunk(None, "stop"), _chunk({"content": "late"})])
    assert out.rejected_lines == [3]


# -- framings and recognition -----------------------------------------------------------------------


def test_sse_with_done_and_comments_and_ndjson_give_the_same_events() -> None:
    """``data: [DONE]`` is a transport sentinel and ``: OPENROUTER PROCESSING`` a comment, for the
    capture reader and the live framer alike; Ollama's NDJSON is one event per line."""
    path = FIXTURES / "f_openrouter_reasoning_details.jsonl"
    lines = path.read_text().splitlines()
    sse = ": OPENROUTER PROCESSING\n\n" + "".join(f"data: {line}\n\n" for line in lines) + "data: [DONE]\n\n"
    from_sse = [e.data for e in read_events(io.StringIO(sse))]
    assert from_sse == [line.encode() for line in lines]
    framer = SSEFramer()
    live = [data for chunk in (sse[i : i + 97].encode() for i in range(0, len(sse), 97)) for data, _ in framer.feed(chunk)] + [d for d, _ in framer.finish()]
    assert live == from_sse
    ndjson = (FIXTURES / "h_ollama_ndjson.jsonl").read_bytes()
    framer = SSEFramer()
    assert [d for d, _ in framer.feed(ndjson) + framer.finish()] == ndjson.splitlines()


def test_recognition_tells_chat_completions_from_the_other_grammars() -> None:
    chat = list(read_events(io.StringIO((FIXTURES / "a_reasoning_then_answer.jsonl").read_text())))
    check_events(GRAMMAR, chat)
    check_events(GRAMMAR, list(read_events(io.StringIO((FIXTURES / "h_ollama_ndjson.jsonl").read_text()))))
    with pytest.raises(NotThisGrammar, match="it reads as openai-chat-completions"):
        check_events("openai-responses", chat)
    anthropic = list(read_events(io.StringIO((LOCAL_FIXTURES / "anthropic-messages" / "a_reasoning_then_answer.jsonl").read_text())))
    with pytest.raises(NotThisGrammar, match="it reads as anthropic-messages"):
        check_events(GRAMMAR, anthropic)


# -- the envelope and the worker's core -------------------------------------------------------------


def test_the_issuer_provider_header_reaches_the_stored_artefact_through_the_normalizer_R8() -> None:
    """``rw-issuer-provider`` on every raw record: the worker hands it to the translator, and the
    record it stores names it (a self-served R1 declared as DeepSeek's)."""
    path = FIXTURES / "d_vllm_reasoning_field.jsonl"
    run = RunEnvelope(GRAMMAR, "run-ip", "thread-ip", issuer_provider="deepseek")
    n = Normalizer(translators=translator_for)
    artefacts, outbound = [], []
    with path.open() as f:
        for r in raw_records(run, read_events(f)):
            assert (HEADER_ISSUER_PROVIDER, b"deepseek") in r.headers
            item = n.route(RawRecord(r.key, r.value, tuple(r.headers)))
            assert isinstance(item, RunInput) and item.envelope.issuer_provider == "deepseek"
            step = n.accept(item, 0.0)
            artefacts += step.artefacts
            outbound += step.outbound
    [kept] = artefacts
    assert (kept.kind, kept.issuer.provider, kept.tenant) == ("deepseek.reasoning_content", "deepseek", "default")
    assert not any(b"REASONING_ENCRYPTED_VALUE" in o.value for o in outbound if o.topic == topics.EVENTS)


def test_the_envelope_reads_the_issuer_provider_and_leaves_it_optional() -> None:
    headers = {"rw-run-id": b"r", "rw-provider": GRAMMAR.encode(), "rw-seq": b"0"}
    assert read_envelope(headers, frozenset({GRAMMAR})).issuer_provider is None
    assert read_envelope({**headers, HEADER_ISSUER_PROVIDER: b"ollama:qwen3:8b"}, frozenset({GRAMMAR})).issuer_provider == "ollama:qwen3:8b"


def test_translate_takes_the_issuer_provider_and_writes_the_record(tmp_path: Path, capsys: Any) -> None:
    from reasonwire.workers.cli import main

    artefacts = tmp_path / "a.jsonl"
    status = main(
        ["translate", "--provider", GRAMMAR, "--issuer-provider", "glm", "--artefacts", str(artefacts), str(FIXTURES / "d_vllm_reasoning_field.jsonl")]
    )
    assert status == 0
    [record] = [json.loads(line) for line in artefacts.read_text().splitlines()]
    assert record["kind"] == "glm.reasoning_content" and record["issuer"]["provider"] == "glm"
    capsys.readouterr()


def test_details_text_is_shown_when_the_delta_has_no_reasoning_text_and_merged_without_an_index() -> None:
    """An empty ``reasoning`` string is no text: the item's own text is shown; fragments without
    ``index`` or ``id`` extend the last item of their type instead of starting one each."""
    lines = [
        _chunk({"reasoning": "", "reasoning_details": [{"type": "reasoning.text", "text": "hi", "format": "f"}]}, model="m/x"),
        _chunk({"reasoning_details": [{"type": "reasoning.text", "text": " there"}]}, model="m/x"),
        _chunk({"content": "ok"}, model="m/x"),
        _chunk(None, "stop", model="m/x"),
    ]
    out = translate_lines(GRAMMAR, lines)
    assert "".join(e["delta"] for e in of_type(out, "REASONING_MESSAGE_CONTENT")) == "hi there"
    [item] = out.artefacts
    assert (item.kind, item.value, item.native.value_path, item.native.block) == ("openrouter.reasoning.text", "hi there", ["text"], {"type": "reasoning.text", "format": "f"})


def test_an_abnormal_end_keeps_opaque_only_details_incomplete_without_announcing_them_P5() -> None:
    lines = [_chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "ZW5j", "index": 0, "format": "google-gemini-v1"}]}, model="g/x")]
    out = translate_lines(GRAMMAR, [*lines, orjson.dumps({"error": "gone"})])
    [item] = out.artefacts
    assert not item.complete and item.value == "ZW5j"
    assert of_type(out, "REASONING_ENCRYPTED_VALUE") == [] and of_type(out, "REASONING_START") == []
    assert_valid_stream(out.events)
