"""Per-phase timestamps of the live worker (``RW_BENCH_PHASES=<file>``, set by the harness).

Installed by ``bench.worker_main`` before the worker starts; it wraps — from the
outside, the worker's code is unchanged — the moments of a poll and writes, when
the process exits, the distribution of each phase's duration in ms:

* ``step`` — :meth:`NormalizerWorker.handle` from entry to return: waiting for
  the delivery machine to accept a poll, routing and translating, appending the
  early sends to the outbox;
* ``journal_read`` — ``ArtefactStore.load_journals`` (one round trip);
* ``redis_tx`` — ``ArtefactStore.apply`` (the poll's write script);
* ``early_acked`` — from a send of outputs stepped while the poll was stepped
  being appended to the outbox until the broker acknowledged them (the runs
  still open: most of a poll's outputs);
* ``after_write_acked`` — the same for the sends after the poll's write (runs that
  ended, runs just restored);
* ``close_runs`` — the ended markers' transaction;
* ``commit`` — ``consumer.commit``;
* ``between_polls`` — from one ``handle`` returning to the next one starting
  (the fetch: aiokafka's buffer, ``batch_timeout_ms``, FastStream's loop);
* ``poll_size`` — records per poll;
* ``gc`` — every garbage collection's pause (``gc.callbacks``), by generation;
* ``loop_lag`` — how late a 1 ms timer fires (the event loop blocked).
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import os
import signal
import time
from collections import defaultdict
from typing import Any

import orjson

_SAMPLES: dict[str, list[float]] = defaultdict(list)


def _summary() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, values in _SAMPLES.items():
        if not values:
            continue
        ordered = sorted(values)
        pick = lambda p: ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]  # noqa: E731
        out[name] = {"n": len(ordered), "p50": pick(50), "p90": pick(90), "p99": pick(99), "max": ordered[-1], "sum": sum(ordered)}
    return out


def install(path: str) -> None:
    import reasonwire.workers.services.normalizer as w
    from reasonwire.workers.io.store import ArtefactStore

    samples = _SAMPLES
    last_return = [0.0]

    def timed(owner: Any, name: str, phase: str) -> None:
        original = getattr(owner, name)

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                samples[phase].append((time.perf_counter() - start) * 1000)

        setattr(owner, name, wrapper)

    original_handle = w.NormalizerWorker.handle

    lag_task: list[Any] = []

    async def handle(self: Any, records: Any) -> None:
        if not lag_task:
            lag_task.append(asyncio.ensure_future(_loop_lag()))
        start = time.perf_counter()
        if last_return[0]:
            samples["between_polls"].append((start - last_return[0]) * 1000)
        samples["poll_size"].append(len(records))
        try:
            await original_handle(self, records)
        finally:
            last_return[0] = time.perf_counter()
            samples["step"].append((last_return[0] - start) * 1000)
            consumer = self.consumer
            if consumer is not None and not getattr(consumer, "_rw_timed", False):
                commit = consumer.commit

                async def timed_commit(*args: Any, **kwargs: Any) -> Any:
                    begun = time.perf_counter()
                    try:
                        return await commit(*args, **kwargs)
                    finally:
                        samples["commit"].append((time.perf_counter() - begun) * 1000)

                consumer.commit = timed_commit
                consumer._rw_timed = True

    w.NormalizerWorker.handle = handle  # type: ignore[method-assign]
    timed(ArtefactStore, "load_journals", "journal_read")
    timed(ArtefactStore, "apply", "redis_tx")
    timed(ArtefactStore, "close_runs", "close_runs")
    original_acknowledged = w.NormalizerWorker._acknowledged

    async def acknowledged(self: Any, action: Any, delivered: Any) -> None:
        begun = time.perf_counter()
        try:
            await original_acknowledged(self, action, delivered)
        finally:
            samples["after_write_acked" if action.terminal else "early_acked"].append((time.perf_counter() - begun) * 1000)

    w.NormalizerWorker._acknowledged = acknowledged  # type: ignore[method-assign]

    started: dict[int, float] = {}

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[info["generation"]] = time.perf_counter()
        else:
            begun = started.pop(info["generation"], None)
            if begun is not None:
                samples[f"gc{info['generation']}"].append((time.perf_counter() - begun) * 1000)

    gc.callbacks.append(on_gc)

    async def _loop_lag() -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            samples["loop_lag"].append(max(0.0, (time.perf_counter() - start) * 1000 - 1.0))

    def dump(*_: Any) -> None:
        """Write the phases since the last dump, and start again (SIGUSR1: the harness brackets a
        measurement with two signals and reads the file after the second)."""
        with open(path + ".tmp", "wb") as f:
            f.write(orjson.dumps(_summary()))
        os.replace(path + ".tmp", path)
        samples.clear()
        last_return[0] = 0.0

    signal.signal(signal.SIGUSR1, dump)
    atexit.register(dump)


def maybe_install() -> None:
    path = os.environ.get("RW_BENCH_PHASES")
    if path:
        install(path)
