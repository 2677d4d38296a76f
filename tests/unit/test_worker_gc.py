"""The worker keeps the garbage collector out of its latency tail (issue 17, docs/benchmarks.md)."""

from __future__ import annotations

import gc

from workers.normalize import GC_GEN0_THRESHOLD, tune_gc


def test_after_start_up_everything_alive_is_frozen_and_young_collections_wait_for_2000_allocations() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_freeze_count() > 10_000  # the interpreter's, the libraries' and our objects
        assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD == 2_000  # short pauses (docs/benchmarks.md, fourth pass)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
