"""Where the time goes: the translator in-process (pyinstrument), the live worker (py-spy).

Both profiles are folded into a few named buckets so the report can say what
share of the hot path each kind of work takes. A sample (or a pyinstrument
frame's self time) goes to the bucket of the *innermost* frame on its stack
that matches a bucket rule — so ``event_json`` called from inside the
normalizer counts as serialization, not as normalizer bookkeeping.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

TRANSLATOR_BUCKETS: list[tuple[str, Callable[[str, str], bool]]] = [
    ("parse provider JSON (orjson.loads)", lambda f, p: f == "loads" and "built-in" in p),
    ("serialize output (event_json: orjson of wire dicts; record_json: pydantic-core)", lambda f, p: f in ("event_json", "record_json")),
    ("build contract records (pydantic: artefact, usage, token counts)", lambda f, p: (f in ("__init__", "model_copy") and "pydantic" in p) or f == "validate_python"),
    ("build AG-UI events (wire dicts, reasonwire.workers.core.events)", lambda f, p: p.endswith("core/events.py")),
    ("field checks (errors.require / optional)", lambda f, p: f in ("require", "optional") and p.endswith("errors.py")),
    ("producer discipline (StreamDiscipline)", lambda f, p: p.endswith("discipline.py")),
    ("translator dispatch + handlers + artefact ledger", lambda f, p: "/workers/" in p),
]

WORKER_BUCKETS: list[tuple[str, Callable[[str], bool]]] = [
    # "/telemetry/": the package's folder wherever a tree keeps it (an older tree being compared has workers/telemetry/)
    ("telemetry (reasonwire.workers.ops.telemetry, OpenTelemetry SDK; exporters off)", lambda fr: "/telemetry/" in fr or "opentelemetry/" in fr),
    ("translate (Translator.feed / finish)", lambda fr: fr.startswith(("Translator.feed ", "Translator.finish ", "Translator.abort "))),
    ("serialize AG-UI events and records (event_json / record_json)", lambda fr: fr.startswith(("event_json ", "record_json "))),
    ("Redis key names (reasonwire.contracts.store: urllib quote per key)", lambda fr: "contracts/store.py" in fr),
    ("Redis transaction (ArtefactStore.apply / load_journal)", lambda fr: fr.startswith(("ArtefactStore.",))),
    ("normalizer bookkeeping (route, envelope, headers, audience filters)", lambda fr: fr.startswith(("Normalizer.", "read_envelope ", "_event_record ", "AudienceFilter."))),
    ("publish: record batches per partition, aiokafka send_batch", lambda fr: fr.startswith(("NormalizerWorker._send ", "Outbox."))),
    ("worker adapter: poll pipeline, record conversion, commits (reasonwire.workers.services.normalizer)", lambda fr: fr.startswith(("NormalizerWorker.", "DeliveryMachine.", "_raw_record", "_offsets "))),
    ("FastStream consume path: JSON-decode of raw bodies (decode_message)", lambda fr: fr.startswith("decode_message ")),
    ("FastStream consume path: DI, middlewares, logging", lambda fr: fr.startswith(("LogicSubscriber._run_consume_loop ",))),
    ("aiokafka fetcher / sender tasks, event loop, idle", lambda fr: True),
]


def classify_translator(session_root: Any) -> dict[str, float]:
    """pyinstrument frame tree → seconds per bucket (innermost matching frame wins)."""
    totals: Counter[str] = Counter()

    def walk(frame: Any, bucket: str) -> None:
        function, path = (frame.function or "").rsplit(".", 1)[-1], frame.file_path or ""
        for name, rule in TRANSLATOR_BUCKETS:
            if rule(function, path):
                bucket = name
                break
        totals[bucket] += frame.total_self_time
        for child in frame.children:
            walk(child, bucket)

    walk(session_root, "harness")
    return dict(totals)


def translator_profile(work: Callable[[], Any], seconds: float, out_text: Path) -> dict[str, Any]:
    try:
        from pyinstrument import Profiler
    except ImportError:
        return {"skipped": "pyinstrument is not installed (pip install -e '.[bench]')"}
    profiler = Profiler(interval=0.0002)
    profiler.start()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        work()
    profiler.stop()
    out_text.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
    root = profiler.last_session.root_frame()
    buckets = classify_translator(root)
    total = sum(v for k, v in buckets.items() if k != "harness") or 1.0
    return {"file": str(out_text), "shares": {k: v / total for k, v in sorted(buckets.items(), key=lambda kv: -kv[1]) if k != "harness"}}


_LINE = re.compile(r":\d+\)")


def worker_profile(raw_file: Path) -> dict[str, Any]:
    """py-spy ``--format raw`` (collapsed stacks) → share of samples per bucket, top self frames."""
    if not raw_file.exists():
        return {"skipped": "py-spy is not installed or could not attach"}
    buckets: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in raw_file.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = [_LINE.sub(")", f) for f in stack.split(";")]
        total += n
        leaves[frames[-1]] += n
        buckets[_bucket(frames)] += n
    if not total:
        return {"skipped": "py-spy recorded no samples"}
    return {
        "file": str(raw_file),
        "samples": total,
        "shares": {k: v / total for k, v in buckets.most_common()},
        "top_self": [(k, v / total) for k, v in leaves.most_common(15)],
    }


def _bucket(frames: Sequence[str]) -> str:
    for frame in reversed(frames):
        for name, rule in WORKER_BUCKETS[:-1]:
            if rule(frame):
                return name
    return WORKER_BUCKETS[-1][0]
