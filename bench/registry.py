"""Cost of feeding the P8 content registry, µs per reasoning delta.

``python -m bench.registry [--against REV] [--runs 5] [--mix mixed] [--max-slices N]``

The workload: 20 000 reasoning deltas of 30–80 characters over 64 concurrently
open messages (each ends after 20–200 deltas and a new one takes its key), and
300 base64 artefact values of 500–4000 characters interleaved — registered one
call per delta (``add_stream``) and per value (``add``), the worst case for the
per-call overhead (the worker joins a poll's deltas of a message into one call).
``--mix``: ``plain`` (printable ASCII without quotes), ``escapes`` (quotes,
newlines, non-ASCII and emoji in most deltas) or ``mixed`` (40 % of messages
plain, the others with an occasional such word).

``--against REV`` also loads ``workers/ops/telemetry/registry.py`` as of that git
revision and alternates runs of the two; each figure is the median of
``--runs`` runs (process CPU time, so another process's load counts less).
``--max-slices`` sets the registry's bound: the default is the worker's
(300 000; the workload overfills it, so eviction is measured), 100000000 never
fills (the cost of registering alone).
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from reasonwire.workers.ops.telemetry import registry as current

Op = tuple[str, object, str, bool]
"""("stream", key, delta, end) or ("add", None, value, False)."""

_WORDS = "the user wants a summary so I should check each step and then answer with the result of it".split()
_SPICY = ["don't", "it's", '"quoted"', "naïve", "café", "—", "🙂", "C:\\path", "tab\there", "\n", "\n\n", "“smart”"]
_BASE64 = string.ascii_letters + string.digits + "+/"


def _delta(rng: random.Random, spicy: float) -> str:
    size = rng.randint(30, 80)
    words: list[str] = []
    while sum(map(len, words)) + len(words) < size:
        words.append(rng.choice(_SPICY) if rng.random() < spicy else rng.choice(_WORDS))
    return " ".join(words)[:size]


def workload(mix: str, seed: int = 7, deltas: int = 20_000, values: int = 300) -> list[Op]:
    rng = random.Random(seed)
    left = {k: rng.randint(20, 200) for k in range(64)}
    generation = dict.fromkeys(range(64), 0)
    style = {k: rng.random() for k in range(64)}
    every = deltas // values
    ops: list[Op] = []
    for i in range(deltas):
        k = rng.randrange(64)
        spicy = {"plain": 0.0, "escapes": 0.15}.get(mix, 0.0 if style[k] < 0.4 else 0.05)
        left[k] -= 1
        end = left[k] == 0
        ops.append(("stream", (k, generation[k]), _delta(rng, spicy), end))
        if end:
            generation[k], left[k], style[k] = generation[k] + 1, rng.randint(20, 200), rng.random()
        if i % every == 0 and i // every < values:
            ops.append(("add", None, "".join(rng.choices(_BASE64, k=rng.randint(500, 4000))), False))
    return ops


def _module_at(revision: str) -> ModuleType:
    """``workers/ops/telemetry/registry.py`` as of ``revision``, loaded as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{revision}:workers/ops/telemetry/registry.py"], check=True, capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout
    path = Path(tempfile.mkdtemp()) / f"registry_{revision.replace('/', '_')}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def feed(module: ModuleType, ops: list[Op], max_slices: int) -> float:
    """CPU seconds to register ``ops`` in a new registry."""
    registry = module.OpaqueRegistry(max_slices=max_slices)
    add, add_stream = registry.add, registry.add_stream
    started = time.process_time()
    for kind, key, text, end in ops:
        if kind == "add":
            add(text)
        else:
            add_stream(key, text, end=end)
    elapsed = time.process_time() - started
    assert len(registry) <= max_slices + registry.max_needles
    return elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="REV", help="also measure registry.py as of this git revision")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mix", default="mixed", choices=("mixed", "plain", "escapes"))
    parser.add_argument("--max-slices", type=int, default=300_000)
    args = parser.parse_args(argv)
    versions = {"working tree": current}
    if args.against:
        versions = {args.against: _module_at(args.against), **versions}
    ops = workload(args.mix)
    deltas = sum(kind == "stream" for kind, *_ in ops)
    times: dict[str, list[float]] = {name: [] for name in versions}
    for _ in range(args.runs):  # alternating, so a change in the machine's load hits both
        for name, module in versions.items():
            times[name].append(feed(module, ops, args.max_slices))
    for name, ts in times.items():
        per_delta = [t / deltas * 1e6 for t in ts]
        print(
            f"{args.mix} max_slices={args.max_slices} {name}: {statistics.median(per_delta):.1f} µs/delta "
            f"(median of {args.runs}; min {min(per_delta):.1f}, max {max(per_delta):.1f})"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
