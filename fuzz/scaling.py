"""The scaling probe: is a translator's cost per event independent of how long the run is?

For each grammar, the body of its interleaved fixture (every unit between the
stream's header and its terminal events) is repeated 250 and 2,000 times in one
run — unit indices shifted and provider ids suffixed per repetition so each copy
is a new, valid unit — and the cost per input event (translate, then
``event_json`` every output, as the worker does) is compared. Linear code gives
a ratio near 1.0; the target is ≤ 1.3. Two adversarial shapes are
probed the same way: Bedrock text deltas followed by as many signature deltas
on one reasoning block, and Anthropic text blocks left open while as many
thinking blocks open and close.

Each size is timed several times, interleaved, in CPU time of this process
(``time.process_time``), and the fastest kept: the machine is shared, and the
minimum of CPU time is the measurement least disturbed by other processes.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import orjson

from fuzz.corpus import FIXTURES, sse_name
from reasonwire.workers.core.wire import event_json
from reasonwire.workers.translators import translator_for

SIZES = (250, 2000)
TARGET_RATIO = 1.3

_SEED = {
    "anthropic-messages": "c_interleaved_thinking_tool_calls",
    "openai-responses": "c_interleaved_reasoning_tool_calls",
    "gemini-generate-content": "c2_interleaved_thoughts_and_calls",
    "gemini-interactions": "c_interleaved_thoughts_and_calls",
    "bedrock-converse": "c_interleaved_reasoning_tool_calls",
}
_HEADER = {
    "anthropic-messages": {"message_start"},
    "openai-responses": {"response.created", "response.in_progress", "response.queued"},
    "gemini-interactions": {"interaction.created", "interaction.status_update"},
    "bedrock-converse": {"messageStart"},
}
_TRAILER = {
    "anthropic-messages": {"message_delta", "message_stop"},
    "openai-responses": {"response.completed", "response.incomplete"},
    "gemini-interactions": {"interaction.completed"},
    "bedrock-converse": {"messageStop", "metadata"},
}
_INDEX_KEYS = {
    "anthropic-messages": {"index"},
    "openai-responses": {"output_index"},
    "gemini-generate-content": set(),
    "gemini-interactions": {"index"},
    "bedrock-converse": {"contentBlockIndex"},
}
_ID_KEYS = {"id", "item_id", "call_id", "toolUseId"}


def _kind(grammar: str, obj: dict[str, Any]) -> str:
    if grammar == "gemini-generate-content":
        finished = any(isinstance(c, dict) and c.get("finishReason") for c in obj.get("candidates") or [])
        return "trailer" if finished else "body"
    name = sse_name(grammar, orjson.dumps(obj)) or ""
    if name in _HEADER[grammar]:
        return "header"
    return "trailer" if name in _TRAILER[grammar] else "body"


def _shift(value: Any, grammar: str, offset: int, rep: int) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in _INDEX_KEYS[grammar] and type(v) is int:
                out[k] = v + offset
            elif k in _ID_KEYS and isinstance(v, str):
                out[k] = f"{v}-r{rep}"
            else:
                out[k] = _shift(v, grammar, offset, rep)
        return out
    if isinstance(value, list):
        return [_shift(v, grammar, offset, rep) for v in value]
    return value


def repeated_stream(grammar: str, reps: int) -> list[bytes]:
    """The grammar's interleaved fixture with its body repeated ``reps`` times in one run."""
    path = FIXTURES / grammar / f"{_SEED[grammar]}.jsonl"
    objs = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    header = [o for o in objs if _kind(grammar, o) == "header"]
    body = [o for o in objs if _kind(grammar, o) == "body"]
    trailer = [o for o in objs if _kind(grammar, o) == "trailer"]
    width = 1 + max((v for o in body for k, v in _walk(o) if k in _INDEX_KEYS[grammar] and type(v) is int), default=0)
    lines = [orjson.dumps(o) for o in header]
    for rep in range(reps):
        lines += [orjson.dumps(_shift(o, grammar, rep * width, rep)) for o in body]
    if grammar == "openai-responses":  # the terminal restates the output: leave it out, the items are all done
        for o in trailer:
            o.get("response", {}).pop("output", None)
    lines += [orjson.dumps(o) for o in trailer]
    return lines


def _walk(value: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            out += item.items()
            stack += item.values()
        elif isinstance(item, list):
            stack += item
    return out


def bedrock_signatures(reps: int) -> list[bytes]:
    """One reasoning block: 16·reps text deltas, then 16·reps signature deltas."""
    n = 16 * reps
    text = [{"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "thinking "}}}}] * n
    sig = [{"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "c2ln"}}}}] * n
    objs = [{"messageStart": {"role": "assistant"}}, *text, *sig, {"contentBlockStop": {"contentBlockIndex": 0}}]
    objs += [{"messageStop": {"stopReason": "end_turn"}}, {"metadata": {"usage": {"inputTokens": 1, "outputTokens": 2}}}]
    return [orjson.dumps(o) for o in objs]


def anthropic_open_blocks(reps: int) -> list[bytes]:
    """8·reps text blocks left open, then 8·reps thinking blocks opened and closed."""
    n = 8 * reps
    objs: list[dict[str, Any]] = [{"type": "message_start", "message": {"id": "msg_probe", "model": "claude-sonnet-4-5"}}]
    objs += [{"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}} for i in range(n)]
    for i in range(n, 2 * n):
        objs.append({"type": "content_block_start", "index": i, "content_block": {"type": "thinking", "thinking": ""}})
        objs.append({"type": "content_block_delta", "index": i, "delta": {"type": "thinking_delta", "thinking": "hm"}})
        objs.append({"type": "content_block_stop", "index": i})
    objs.append({"type": "message_stop"})
    return [orjson.dumps(o) for o in objs]


def chat_completions_repeated(reps: int) -> list[bytes]:
    """A DeepSeek-shaped turn whose reasoning and parallel tool calls repeat ``reps`` times: Chat
    Completions chunks name their tool calls by an ``index`` nested beside the choice's own
    ``index``, so the generic shift does not apply."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {"id": "cmpl-probe", "object": "chat.completion.chunk", "model": "deepseek-v4-pro"}
        return orjson.dumps({**body, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    lines = [chunk({"role": "assistant", "content": None, "reasoning_content": ""})]
    for rep in range(reps):
        lines += [chunk({"reasoning_content": piece}) for piece in ("Two lookups: ", "Beijing and ", "Shanghai. ")]
        for i, city in enumerate(("Beijing", "Shanghai")):
            index = 2 * rep + i
            call = {"index": index, "id": f"call_{index}", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
            lines += [chunk({"tool_calls": [call]}), chunk({"tool_calls": [{"index": index, "function": {"arguments": '{"city":'}}]})]
            lines.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": f'"{city}"}}'}}]}))
    lines.append(chunk({}, "tool_calls"))
    return lines


PROBES: dict[str, tuple[str, Callable[[int], list[bytes]]]] = {
    **{g: (g, lambda reps, g=g: repeated_stream(g, reps)) for g in _SEED},
    "openai-chat-completions": ("openai-chat-completions", chat_completions_repeated),
    "bedrock: text then signature deltas": ("bedrock-converse", bedrock_signatures),
    "anthropic: open text blocks, then thinking blocks": ("anthropic-messages", anthropic_open_blocks),
}


def cost_per_event(grammar: str, lines: list[bytes], *, tries: int) -> tuple[float, int]:
    """Fastest of ``tries`` runs: seconds per input event, and the output event count."""
    best = float("inf")
    out = 0
    for _ in range(tries):
        gc.collect()
        started = time.process_time()
        t = translator_for(grammar, run_id="run-probe", model="probe")
        out = 0
        for line in lines:
            for event in t.feed(line).events:
                event_json(event)
                out += 1
        for event in t.finish().events:
            event_json(event)
            out += 1
        best = min(best, (time.process_time() - started) / len(lines))
    return best, out


def probe(name: str, *, sizes: tuple[int, int] = SIZES, rounds: int = 6) -> dict[str, Any]:
    grammar, build = PROBES[name]
    small, large = build(sizes[0]), build(sizes[1])
    cost_small = cost_large = float("inf")
    for _ in range(rounds):  # interleaved, so a busy spell of the machine hits both sizes
        cost_small = min(cost_small, cost_per_event(grammar, small, tries=3)[0])
        large_cost, out = cost_per_event(grammar, large, tries=1)
        cost_large = min(cost_large, large_cost)
    return {
        "probe": name,
        "events": (len(small), len(large)),
        "out_events": out,
        "us_per_event": (cost_small * 1e6, cost_large * 1e6),
        "ratio": cost_large / cost_small,
    }


def main() -> int:
    worst = 0.0
    print(f"scaling probe: cost per event, body repeated {SIZES[0]} vs {SIZES[1]} times (target ratio <= {TARGET_RATIO})")
    for name in PROBES:
        r = probe(name)
        worst = max(worst, r["ratio"])
        print(
            f"  {name:52s} {r['events'][0]:>7,} / {r['events'][1]:>8,} events  "
            f"{r['us_per_event'][0]:6.2f} / {r['us_per_event'][1]:6.2f} us/event  ratio {r['ratio']:.2f}"
        )
    print(f"  worst ratio {worst:.2f} ({'ok' if worst <= TARGET_RATIO else 'OVER TARGET'})")
    return 0 if worst <= TARGET_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
