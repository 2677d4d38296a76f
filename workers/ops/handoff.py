"""Poll returned → outputs handed to the producer, timed inside the worker (``make bench`` targets).

The end-to-end latency ``make bench`` measures includes the broker twice and the harness's
own producer and collector; the worker's own share of it has targets too: from
the moment a poll's records reach the worker to the moment a batch of their outputs is queued
with the producer — for runs that continue (sent while the poll is stepped) and for terminal
outputs (``RUN_FINISHED`` / ``RUN_ERROR`` and what follows a run's end, sent after the poll's
Redis transaction). The worker calls :meth:`Recorder.handed` at those two places.

Off unless ``RW_BENCH_HANDOFF_FILE`` names a file (the benchmark sets it; it is not an
operator's setting, so it is not in docs/operations.md's table, which lists the settings
models' variables — docs/benchmarks.md documents it). Off, :data:`recorder` is an object whose
``handed`` does nothing: one call per hand-off (a few per poll), no clock read, no allocation.
On, every hand-off appends one sample, and the samples are written to the file when the
process exits (``atexit``: a worker stopped with SIGTERM exits normally). Timestamps are
``time.perf_counter()``: ``CLOCK_MONOTONIC`` on Linux, the same clock in every process, so the
harness cuts the samples into its own measurement windows (``bench.targets.handoff_window``).
"""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Mapping
from pathlib import Path

import orjson

ENV = "RW_BENCH_HANDOFF_FILE"


class Off:
    """Disabled: :meth:`handed` does nothing (the production default)."""

    __slots__ = ()
    enabled = False

    def handed(self, poll_started: float, terminal: bool) -> None:
        """Nothing: the worker's hot path pays one no-op call per hand-off."""


class Recorder:
    """Samples ``(handed at, ms since the poll started, terminal)`` kept in memory, written at exit."""

    enabled = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.samples: list[tuple[float, float, bool]] = []

    def handed(self, poll_started: float, terminal: bool) -> None:
        """A batch of outputs of the poll that started at ``poll_started`` (``time.perf_counter()``)
        was just queued with the producer; ``terminal``: outputs of runs that ended."""
        now = time.perf_counter()
        self.samples.append((now, (now - poll_started) * 1000.0, terminal))

    def write(self) -> None:
        """Every sample so far, as JSON (``{"clock": …, "samples": [[t, ms, terminal], …]}``),
        replacing the file atomically: a reader never sees half of it."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(orjson.dumps({"clock": "time.perf_counter (CLOCK_MONOTONIC)", "samples": self.samples}))
        os.replace(tmp, self.path)


def from_env(env: Mapping[str, str] | None = None) -> Off | Recorder:
    """A :class:`Recorder` writing at exit to the file ``RW_BENCH_HANDOFF_FILE`` names, or :class:`Off`."""
    path = (os.environ if env is None else env).get(ENV)
    if not path:
        return Off()
    made = Recorder(path)
    atexit.register(made.write)
    return made


recorder: Off | Recorder = from_env()
"""The process's recorder; the worker calls ``handoff.recorder.handed(poll_started, terminal)``."""
