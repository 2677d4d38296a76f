"""The same streams through LiteLLM's own streaming translation (``make bench`` section 2).

LiteLLM is installed only for the benchmark (``pip install -e '.[bench]'``),
pinned to an exact release from before the March 2026 PyPI compromise
(1.82.7 / 1.82.8 carried a credential stealer): see docs/benchmarks.md.

What each side does per provider event, from the same raw bytes:

* **reasonwire** — exactly part 1's path: ``Translator.feed(raw)``
  (``orjson.loads`` inside), then every AG-UI event it emits serialized with
  ``event_json`` (plus artefact and usage records with ``record_json``). A
  fresh translator per run.
* **LiteLLM, wire** — ``orjson.loads(raw)`` (the same JSON library; LiteLLM's
  own iterators use the slower stdlib ``json.loads``), then the provider's
  chunk parser, then the chunk serialized the way LiteLLM's proxy puts it on
  the wire: ``chunk.model_dump_json(exclude_none=True, exclude_unset=True)``. A
  fresh iterator per run (they keep per-stream state: tool index, block type).

  - Anthropic Messages: ``litellm.llms.anthropic.chat.handler.ModelResponseIterator.chunk_parser``
    (Anthropic SSE event dict → OpenAI chat-completion ``ModelResponseStream``,
    thinking as ``reasoning_content`` / ``thinking_blocks``).
  - OpenAI Responses: ``litellm.completion_extras.litellm_responses_transformation
    .transformation.OpenAiResponsesToChatCompletionStreamIterator.chunk_parser``
    (Responses event dict → chat-completion chunk; what ``litellm.completion``
    runs for a Responses-API model).

* **LiteLLM, parser only** — the chunk parser alone on pre-parsed dicts: no
  parse, no serialization. A lower bound of LiteLLM's cost, the most favourable
  reading for LiteLLM; its real streaming path (``CustomStreamWrapper``) adds
  per-chunk logging and bookkeeping on top of this.

Per-event rates are per *input* provider event on both sides.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

import orjson

from bench.cpu import Workload, timed, translate_run

COMPROMISED = {"1.82.7", "1.82.8"}


def _import_litellm() -> dict[str, Callable[[], Any]]:
    """Iterator factories per grammar; refuses a known-compromised LiteLLM."""
    version = metadata.version("litellm")
    if version in COMPROMISED:
        raise RuntimeError(f"litellm {version} is a known-compromised release; refusing to import it")
    # no network at import: LiteLLM otherwise fetches its model cost map from GitHub
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from litellm.completion_extras.litellm_responses_transformation.transformation import (
        OpenAiResponsesToChatCompletionStreamIterator,
    )
    from litellm.llms.anthropic.chat.handler import ModelResponseIterator

    return {
        "anthropic-messages": lambda: ModelResponseIterator(streaming_response=iter(()), sync_stream=True),
        "openai-responses": lambda: OpenAiResponsesToChatCompletionStreamIterator(
            streaming_response=iter(()), sync_stream=True
        ),
    }


def litellm_version() -> str | None:
    try:
        return metadata.version("litellm")
    except metadata.PackageNotFoundError:
        return None


def _litellm_wire(factory: Callable[[], Any], runs: Sequence[Sequence[bytes]]) -> int:
    written = 0
    for lines in runs:
        parser = factory().chunk_parser
        for raw in lines:
            chunk = parser(orjson.loads(raw))
            written += len(chunk.model_dump_json(exclude_none=True, exclude_unset=True))
    return written


def _litellm_parser_only(factory: Callable[[], Any], runs: Sequence[Sequence[dict[str, Any]]]) -> None:
    for dicts in runs:
        parser = factory().chunk_parser
        for obj in dicts:
            parser(obj)


def measure(workloads: dict[str, Workload], *, rounds: int = 5) -> dict[str, Any]:
    if litellm_version() is None:
        return {"skipped": "litellm is not installed (pip install -e '.[bench]')"}
    factories = _import_litellm()
    results: dict[str, Any] = {"litellm_version": litellm_version(), "grammars": {}}
    for grammar, factory in factories.items():
        w = workloads.get(grammar)
        if w is None:
            continue
        run_ids = [f"run-{i}" for i in range(len(w.runs))]
        dicts = [[orjson.loads(raw) for raw in lines] for lines in w.runs]

        def ours(w: Workload = w, run_ids: list[str] = run_ids) -> None:
            for rid, lines in zip(run_ids, w.runs):
                translate_run(w.cls, lines, rid)

        def theirs(w: Workload = w, factory: Callable[[], Any] = factory) -> None:
            _litellm_wire(factory, w.runs)

        def theirs_parser(factory: Callable[[], Any] = factory, dicts: list[list[dict[str, Any]]] = dicts) -> None:
            _litellm_parser_only(factory, dicts)

        for fn in (ours, theirs, theirs_parser):
            fn()  # warm-up
        t_ours, t_wire, t_parser = [], [], []
        for _ in range(rounds):
            t_ours.append(timed(ours))
            t_wire.append(timed(theirs))
            t_parser.append(timed(theirs_parser))
        n = w.input_events
        results["grammars"][grammar] = {
            "runs": len(w.runs),
            "input_events": n,
            "reasonwire_events_per_s": n / statistics.median(t_ours),
            "litellm_wire_events_per_s": n / statistics.median(t_wire),
            "litellm_parser_only_events_per_s": n / statistics.median(t_parser),
            # >1 means reasonwire is faster; the target is >= 3
            "speedup_vs_litellm_wire": statistics.median(w_ / o for o, w_ in zip(t_ours, t_wire)),
            "speedup_vs_litellm_parser_only": statistics.median(p / o for o, p in zip(t_ours, t_parser)),
        }
    return results


if __name__ == "__main__":  # quick look: python -m bench.litellm_compare
    from bench.cpu import workload
    from bench.streams import runs, templates

    wl = {g: workload(g, list(runs(templates(g), 300))) for g in ("anthropic-messages", "openai-responses")}
    orjson_out = orjson.dumps(measure(wl, rounds=3), option=orjson.OPT_INDENT_2)
    sys.stdout.write(orjson_out.decode() + "\n")
