"""``python -m bench.passthrough``: the baseline — a bare aiokafka consume→produce loop.

Same broker, topics, partitions and batch settings as the normalizer worker:
one consumer in a group (no auto-commit, ``earliest``), ``getmany(timeout_ms=20,
max_records=RW_MAX_BATCH)`` like FastStream's batch subscriber, one producer
with ``acks="all"`` and ``linger_ms=2`` like the worker's producer. Each record is
re-published unchanged (key, value, headers) to the events topic; the batch's
sends are awaited, then the offsets are committed — the worker's order
(publish, then commit) without translation, Redis or framework.

With ``RW_BENCH_PIPELINED=1`` (kind ``passthrough-pipelined``) the loop does
not wait: each batch's acks and commit complete in the background, in batch
order, while the next batch is fetched and sent — what the pipelined worker
does, without translation, Redis or framework. The serial loop is the issue's
baseline; the pipelined one is the latency floor the worker can be compared
with (the serial loop holds each record for a publish and a commit round trip
before it fetches the next batch).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition


class _SayAssigned(ConsumerRebalanceListener):  # type: ignore[misc]
    """Logs each assignment the way FastStream does, so the harness reads both the same way."""

    async def on_partitions_revoked(self, revoked: object) -> None:
        """Nothing to hand over: a passthrough holds no state."""

    async def on_partitions_assigned(self, assigned: object) -> None:
        print(f"assigned to partitions: ({', '.join(str(tp) for tp in assigned)})", flush=True)  # type: ignore[attr-defined]


async def main() -> None:
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    source, sink = os.environ["RW_BENCH_SOURCE"], os.environ["RW_BENCH_SINK"]
    max_batch = int(os.environ.get("RW_MAX_BATCH", "200"))
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=os.environ["RW_GROUP_ID"],
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    await producer.start()
    await consumer.start()
    consumer.subscribe([source], listener=_SayAssigned())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    pipelined = os.environ.get("RW_BENCH_PIPELINED") == "1"
    previous: asyncio.Task[None] | None = None

    async def complete(pending: list[asyncio.Future[object]], offsets: dict[TopicPartition, int], before: asyncio.Task[None] | None) -> None:
        await asyncio.gather(*pending)
        if before is not None:
            await before  # commits stay in batch order
        await consumer.commit(offsets)

    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=20, max_records=max_batch)
            pending = [
                await producer.send(sink, r.value, key=r.key, headers=list(r.headers))
                for records in batch.values()
                for r in records
            ]
            if not pending:
                continue
            if pipelined:
                offsets = {tp: records[-1].offset + 1 for tp, records in batch.items() if records}
                previous = asyncio.create_task(complete(pending, offsets, previous))
            else:
                await asyncio.gather(*pending)
                await consumer.commit()
        if previous is not None:
            await previous
    finally:
        await consumer.stop()
        await producer.stop()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
