"""The worker keeps the garbage collector out of its latency tail (docs/benchmarks.md)."""

from __future__ import annotations

import gc

from reasonwire.workers.ops.gc_pause import GC_GEN0_THRESHOLD, tune_gc


def test_after_start_up_everything_alive_is_frozen_and_young_collections_wait_for_20000_allocations() -> None:
    """A young collection per poll over the poll's own live objects was ~12 %
    of the worker's CPU at 2 000."""
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_freeze_count() > 10_000  # the interpreter's, the libraries' and our objects
        assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD == 20_000  # not one young collection per poll (tune_gc's docstring)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_polls_message_goes_with_the_poll_not_with_the_next_full_collection() -> None:
    """FastStream caches the decoded body in the message: a body that is the message itself made
    a reference cycle, and every poll's 200 records waited for a full collection (the live
    worker freed ~10 000 records per full collection at 1 200 records/s)."""
    import asyncio
    import weakref

    from aiokafka.structs import ConsumerRecord
    from faststream.kafka.message import KafkaAckableMessage

    from reasonwire.workers.services.normalizer_app import Polled, _polled

    record = ConsumerRecord("reasoning.raw.v1", 0, 7, 0, 0, b"k", b"v", None, 1, 1, [])
    consumer = object()
    gc.disable()
    try:
        msg = KafkaAckableMessage(raw_message=(record,), body=b"", consumer=consumer)
        msg.set_decoder(_polled)
        polled = asyncio.run(msg.decode())
        assert polled == Polled((record,), consumer)
        assert asyncio.run(msg.decode()) is polled  # cached, as FastStream does between filters and handler
        gone = weakref.ref(msg)
        del msg
        assert gone() is None, "the message is in a reference cycle: only the garbage collector frees it"
    finally:
        gc.enable()
