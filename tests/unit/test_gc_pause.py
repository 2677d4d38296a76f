"""The collector waits while a poll is stepped, and runs what came due right after."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from reasonwire.workers.ops.gc_pause import collection_paused


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every collection that starts while the test runs, with the worker's
    young threshold (``tune_gc``: 2 000) and nothing left over from earlier tests."""
    seen: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    before, was = gc.get_threshold(), gc.isenabled()
    gc.enable()
    gc.collect()
    gc.set_threshold(2_000, *before[1:])
    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)
        gc.set_threshold(*before)
        if not was:
            gc.disable()


def _allocate(n: int) -> list[list[int]]:
    """``n`` live containers, as a poll's steps and output records are until it is handed over."""
    return [[i] for i in range(n)]


def test_no_collection_starts_while_a_poll_is_stepped(collections: list[int]) -> None:
    with collection_paused():
        poll = _allocate(10_000)  # five times the young threshold
        assert collections == []
    assert gc.isenabled()
    poll += _allocate(1)  # what the adapter allocates next, between polls
    assert collections, "the collection that came due during the poll never ran"


def test_without_the_pause_the_same_poll_is_collected_in_the_middle(collections: list[int]) -> None:
    """The check above can fail: the same allocations collect on their own."""
    _allocate(10_000)
    assert collections


def test_an_exception_or_a_nested_pause_leaves_the_collector_as_it_was(collections: list[int]) -> None:
    with pytest.raises(RuntimeError), collection_paused():
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block does not switch it back on
        raise RuntimeError("stepping failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()  # off before: stays off
    finally:
        gc.enable()
