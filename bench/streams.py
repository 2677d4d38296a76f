"""Realistic provider streams for the benchmarks, grown from the sample fixtures.

Theory of operation
-------------------
The fixtures are real stream *shapes* but short. A benchmark wants thousands of
runs of those shapes with the lengths real traffic has, so each fixture becomes
a *template* and every generated run is the template with its streamed text
re-cut:

* the consecutive delta events of one unit (a thinking block, an output-text
  part, a tool call's argument fragments) are concatenated and split again into
  pieces whose sizes follow the fixture's own chunk sizes for that kind of text
  (x0.5 to x2 per run), so the number of events per run varies;
* reasoning and answer text may also be *scaled*: the unit's text repeated
  ``m`` times (m in 1, 2, 4, 8, 16). Grammars that restate a part's full text in
  a later event (OpenAI's ``*.done``, ``output_item.done``, ``response.completed``)
  get every leaf string equal to the old text replaced by the new one, so the
  stream stays consistent (P2). Tool-call arguments are only re-cut, never
  scaled: they must stay one JSON document.

Opaque values (signatures, encrypted content) are copied byte for byte, never
cut. Every template is checked once through its translator: it must translate
with no rejection, the same end and the same number of warnings as the fixture
it came from; a template that does not is dropped and reported, never measured.

A grammar whose delta events this module does not know yet still gets runs: its
fixtures as they are (lengths then vary only across fixtures).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from reasonwire.workers.core.translator import RunEnd
from reasonwire.workers.translators import translator_for

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("RW_FIXTURES", ROOT / "tests" / "fixtures"))
"""The sample streams the templates are cut from: the repository's, unless RW_FIXTURES names another folder."""

SCALES = (1, 2, 4, 8, 16)
SCALE_WEIGHTS = (0.35, 0.25, 0.2, 0.12, 0.08)
"""Most runs are short; a tail is long (a 16x run has ~16x the reasoning text)."""

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Delta:
    """Where one delta event keeps its streamed text."""

    unit: Hashable
    kind: str  # "reasoning" | "text" | "args"
    path: Path_


DeltaSpec = Callable[[dict[str, Any]], Delta | None]


def _anthropic(obj: dict[str, Any]) -> Delta | None:
    if obj.get("type") != "content_block_delta":
        return None
    delta = obj.get("delta") or {}
    field_, kind = {
        "thinking_delta": ("thinking", "reasoning"),
        "text_delta": ("text", "text"),
        "input_json_delta": ("partial_json", "args"),
    }.get(delta.get("type"), (None, None))
    if field_ is None:
        return None
    return Delta(("block", obj.get("index")), kind, ("delta", field_))


_OPENAI_KINDS = {
    "response.reasoning_summary_text.delta": ("reasoning", "summary_index"),
    "response.reasoning_text.delta": ("reasoning", "content_index"),
    "response.output_text.delta": ("text", "content_index"),
    "response.refusal.delta": ("text", "content_index"),
    "response.function_call_arguments.delta": ("args", None),
}


def _openai(obj: dict[str, Any]) -> Delta | None:
    spec = _OPENAI_KINDS.get(obj.get("type", ""))
    if spec is None:
        return None
    kind, part = spec
    return Delta((obj["type"], obj.get("item_id"), obj.get(part) if part else None), kind, ("delta",))


def _bedrock(obj: dict[str, Any]) -> Delta | None:
    body = obj.get("contentBlockDelta")
    if not isinstance(body, dict):
        return None
    delta, unit = body.get("delta") or {}, ("block", body.get("contentBlockIndex"))
    base: Path_ = ("contentBlockDelta", "delta")
    if isinstance(delta.get("reasoningContent"), dict) and "text" in delta["reasoningContent"]:
        return Delta(unit, "reasoning", (*base, "reasoningContent", "text"))
    if "text" in delta:
        return Delta(unit, "text", (*base, "text"))
    if isinstance(delta.get("toolUse"), dict) and "input" in delta["toolUse"]:
        return Delta(unit, "args", (*base, "toolUse", "input"))
    return None


def _gemini_generate(obj: dict[str, Any]) -> Delta | None:
    candidates = obj.get("candidates")
    if not isinstance(candidates, list) or len(candidates) != 1:
        return None
    candidate = candidates[0]
    parts = (candidate.get("content") or {}).get("parts")
    if candidate.get("finishReason") or not isinstance(parts, list) or len(parts) != 1:
        return None
    part = parts[0]
    if set(part) - {"text", "thought"} or not isinstance(part.get("text"), str):
        return None  # a part with a signature or a call is opaque/whole: never cut
    thought = part.get("thought") is True
    return Delta(("thought" if thought else "text",), "reasoning" if thought else "text", ("candidates", 0, "content", "parts", 0, "text"))


def _gemini_interactions(obj: dict[str, Any]) -> Delta | None:
    if obj.get("event_type") != "step.delta":
        return None
    delta, unit = obj.get("delta") or {}, ("step", obj.get("index"))
    kind = delta.get("type")
    if kind == "thought_summary" and isinstance((delta.get("content") or {}).get("text"), str):
        return Delta(unit, "reasoning", ("delta", "content", "text"))
    if kind == "text" and isinstance(delta.get("text"), str):
        return Delta(unit, "text", ("delta", "text"))
    if kind == "arguments_delta" and isinstance(delta.get("arguments"), str):
        return Delta(unit, "args", ("delta", "arguments"))
    return None


_CHAT_TEXT = {"reasoning_content": "reasoning", "reasoning": "reasoning", "content": "text"}


def _chat_completions(obj: dict[str, Any]) -> Delta | None:
    """One streamed field per chunk: reasoning, answer text or one call's argument fragment (Chat
    Completions), or an Ollama line's ``message.thinking`` / ``message.content``."""
    message = obj.get("message")
    if isinstance(message, dict) and obj.get("done") is False:
        fields = [k for k in ("thinking", "content") if message.get(k)]
        if len(fields) == 1 and set(message) <= {"role", "content", "thinking"}:
            kind = "reasoning" if fields[0] == "thinking" else "text"
            return Delta((kind,), kind, ("message", fields[0]))
        return None
    choices = obj.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict) or choices[0].get("finish_reason"):
        return None
    delta = choices[0].get("delta")
    if not isinstance(delta, dict) or obj.get("usage"):
        return None
    present = [k for k, v in delta.items() if v not in (None, "") and k != "role"]
    if len(present) != 1:
        return None
    name, base = present[0], ("choices", 0, "delta")
    if name in _CHAT_TEXT and isinstance(delta[name], str):
        return Delta((_CHAT_TEXT[name],), _CHAT_TEXT[name], (*base, name))
    calls = delta.get("tool_calls")
    if name == "tool_calls" and isinstance(calls, list) and len(calls) == 1 and set(calls[0]) == {"index", "function"}:
        function = calls[0]["function"]
        if isinstance(function, dict) and set(function) == {"arguments"} and isinstance(function["arguments"], str):
            return Delta(("call", calls[0]["index"]), "args", (*base, "tool_calls", 0, "function", "arguments"))
    return None


DELTA_SPECS: dict[str, DeltaSpec] = {
    "anthropic-messages": _anthropic,
    "openai-responses": _openai,
    "bedrock-converse": _bedrock,
    "gemini-generate-content": _gemini_generate,
    "gemini-interactions": _gemini_interactions,
    "openai-chat-completions": _chat_completions,
}


# -- templates ----------------------------------------------------------------------


@dataclass
class Segment:
    """A stretch of a template: fixed lines, or the delta run of one unit."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    delta: Delta | None = None
    text: str = ""
    mean_chunk: float = 0.0


@dataclass
class Template:
    grammar: str
    name: str
    scale: int
    segments: list[Segment]
    end: RunEnd
    warnings: int
    renumber: bool


def fixture_files(grammar: str) -> list[Path]:
    return sorted(p for p in (FIXTURES / grammar).glob("*.jsonl") if p.with_suffix(".expected.json").exists())


def _get(obj: Any, path: Path_) -> Any:
    for step in path:
        obj = obj[step]
    return obj


def _set(obj: Any, path: Path_, value: Any) -> None:
    for step in path[:-1]:
        obj = obj[step]
    obj[path[-1]] = value


def _replace_leaves(obj: Any, old: str, new: str) -> Any:
    if isinstance(obj, dict):
        return {k: _replace_leaves(v, old, new) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_replace_leaves(v, old, new) for v in obj]
    return new if obj == old else obj


def _segments(grammar: str, objs: list[dict[str, Any]]) -> list[Segment]:
    spec = DELTA_SPECS.get(grammar)
    out: list[Segment] = []
    for obj in objs:
        delta = spec(obj) if spec else None
        last = out[-1] if out else None
        if delta is None:
            if last is None or last.delta is not None:
                out.append(Segment())
            out[-1].lines.append(obj)
        elif last is not None and last.delta == delta:
            last.lines.append(obj)
        else:
            out.append(Segment(lines=[obj], delta=delta))
    for seg in out:
        if seg.delta is not None:
            pieces = [_get(o, seg.delta.path) for o in seg.lines]
            seg.text = "".join(pieces)
            seg.mean_chunk = max(1.0, len(seg.text) / max(1, len(pieces)))
    return out


def _scaled(segments: list[Segment], scale: int) -> list[Segment]:
    """Repeat every reasoning/text unit's text ``scale`` times; restatements follow (P2)."""
    if scale == 1:
        return segments
    out = [Segment(list(s.lines), s.delta, s.text, s.mean_chunk) for s in segments]
    for i, seg in enumerate(out):
        if seg.delta is None or seg.delta.kind == "args" or not seg.text:
            continue
        old, new = seg.text, seg.text * scale
        seg.text = new
        for later in out[i + 1 :]:
            if later.delta is None:
                later.lines = [_replace_leaves(o, old, new) for o in later.lines]
    return out


def render(template: Template, rng: random.Random, *, chunk_factor: float = 1.0) -> list[bytes]:
    """One run of ``template``: its delta runs re-cut at random sizes around the fixture's own."""
    lines: list[bytes] = []
    for seg in template.segments:
        if seg.delta is None:
            lines += [orjson.dumps(o) for o in seg.lines]
            continue
        mean = seg.mean_chunk * chunk_factor
        lo, hi = max(1, int(mean * 0.5)), max(1, int(mean * 1.5))
        text, pos, proto = seg.text, 0, seg.lines[0]
        if not text:  # an empty delta is a shape of its own: keep it
            lines += [orjson.dumps(o) for o in seg.lines]
            continue
        while pos < len(text):
            size = rng.randint(lo, hi)
            piece, pos = text[pos : pos + size], pos + size
            obj = orjson.loads(orjson.dumps(proto))
            _set(obj, seg.delta.path, piece)
            lines.append(orjson.dumps(obj))
    if template.renumber:  # OpenAI numbers every event; keep the numbering dense
        renumbered = []
        for n, raw in enumerate(lines):
            obj = orjson.loads(raw)
            obj["sequence_number"] = n
            renumbered.append(orjson.dumps(obj))
        lines = renumbered
    return lines


def _translate_summary(grammar: str, lines: list[bytes]) -> tuple[RunEnd | None, int, bool]:
    translator = translator_for(grammar, run_id="bench-check")
    warnings, rejected = 0, False
    for raw in lines:
        out = translator.feed(raw)
        warnings += len(out.warnings)
        rejected = rejected or out.rejection is not None
    out = translator.finish()
    warnings += len(out.warnings)
    return translator.end, warnings, rejected or out.rejection is not None


@dataclass
class TemplateSet:
    grammar: str
    templates: list[Template]
    dropped: list[str]


def templates(grammar: str) -> TemplateSet:
    """Every finished fixture of ``grammar`` at every scale that still translates the same."""
    kept, dropped = [], []
    for path in fixture_files(grammar):
        objs = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
        raw = [orjson.dumps(o) for o in objs]
        end, warnings, rejected = _translate_summary(grammar, raw)
        if rejected or end is not RunEnd.FINISHED:
            continue  # error / interrupted / malformed cases are correctness cases, not traffic
        segments = _segments(grammar, objs)
        renumber = any("sequence_number" in o for o in objs)
        for scale in SCALES:
            t = Template(grammar, path.stem, scale, _scaled(segments, scale), end, warnings, renumber)
            check = _translate_summary(grammar, render(t, random.Random(0)))
            if check != (end, warnings, False):
                dropped.append(f"{path.stem} x{scale}: {check}")
                continue
            kept.append(t)
    return TemplateSet(grammar, kept, dropped)


def runs(tset: TemplateSet, count: int, *, seed: int = 1) -> Iterator[list[bytes]]:
    """``count`` runs: a random template (fixture x scale, weighted to short) re-cut at random."""
    rng = random.Random(seed)
    by_scale: dict[int, list[Template]] = {}
    for t in tset.templates:
        by_scale.setdefault(t.scale, []).append(t)
    scales = [s for s in SCALES if s in by_scale]
    weights = [SCALE_WEIGHTS[SCALES.index(s)] for s in scales]
    for _ in range(count):
        scale = rng.choices(scales, weights)[0]
        template = rng.choice(by_scale[scale])
        yield render(template, rng, chunk_factor=rng.uniform(0.5, 2.0))
