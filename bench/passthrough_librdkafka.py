"""``python -m bench.passthrough_librdkafka``: the pipelined passthrough on librdkafka — what the Kafka client costs.

Kind ``passthrough-librdkafka`` (``python -m bench.ab``; context, not one of ``make bench``'s
baselines): the same consume → re-publish → commit loop as ``passthrough-pipelined`` (same
group semantics, batch size, ``acks=all``, ``linger.ms=2``, commits in batch order once a
batch's outputs are acknowledged), written on confluent-kafka — librdkafka, a C client with its
own network threads — in one synchronous loop instead of aiokafka on asyncio. Beside
``passthrough-pipelined`` it tells how much of a pipelined consumer's CPU at a moderate rate is
the client and the event loop rather than what the consumer does with the records: at 6,981
records/s on this project's 2-core host it used 0.24–0.27 of a core where the aiokafka one
used 0.59–0.62, with a lower p99 (docs/benchmarks.md, "What the Kafka client costs").

The loop: wait up to 20 ms for one record, take whatever else is already fetched (up to
``RW_MAX_BATCH``), re-publish each record unchanged (key, value, headers) — to the partition
murmur2 of its key picks, as aiokafka's and Java's default partitioner does — serve delivery
reports, and commit the offsets of every leading batch whose outputs were all acknowledged
(asynchronously, in batch order). A failed delivery stops the process with the error: a
benchmark must not count records it lost.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import deque

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition


class _Batch:
    """One poll's records: how many outputs are unacknowledged, and the offsets to commit after."""

    __slots__ = ("left", "offsets")

    def __init__(self) -> None:
        self.left = 0
        self.offsets: dict[int, int] = {}

    def delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            raise SystemExit(f"passthrough-librdkafka: a delivery failed: {err}")
        self.left -= 1


def _say_assigned(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
    """Logs each assignment the way FastStream does, so the harness reads every kind the same way."""
    listed = ", ".join(f"TopicPartition(topic={tp.topic!r}, partition={tp.partition})" for tp in partitions)
    print(f"assigned to partitions: ({listed})", flush=True)


def main() -> None:
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    source, sink = os.environ["RW_BENCH_SOURCE"], os.environ["RW_BENCH_SINK"]
    max_batch = int(os.environ.get("RW_MAX_BATCH", "200"))
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": os.environ["RW_GROUP_ID"], "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, "partitioner": "murmur2_random"})
    consumer.subscribe([source], on_assign=_say_assigned)
    stopping: list[int] = []  # the signal handler's mark: SIGTERM ends the loop
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    batches: deque[_Batch] = deque()  # in poll order: the oldest leaves first, once acknowledged

    def commit_acknowledged(*, wait: bool = False) -> None:
        offsets: dict[int, int] = {}
        while batches and batches[0].left == 0:
            offsets.update(batches.popleft().offsets)
        if offsets:
            consumer.commit(offsets=[TopicPartition(source, p, o) for p, o in offsets.items()], asynchronous=not wait)

    try:
        while not stopping:
            first = consumer.poll(0.02)
            if first is not None:
                batch = _Batch()
                for message in [first, *consumer.consume(num_messages=max_batch - 1, timeout=0)]:
                    _republish(producer, sink, message, batch)
                batches.append(batch)
            producer.poll(0)  # delivery reports: batches complete
            commit_acknowledged()
        producer.flush(10)
        commit_acknowledged(wait=True)  # the last commit lands before the consumer closes
    finally:
        consumer.close()


def _republish(producer: Producer, sink: str, message: Message, batch: _Batch) -> None:
    error = message.error()
    if error is not None:
        raise SystemExit(f"passthrough-librdkafka: the consumer reported {error}")
    batch.left += 1
    batch.offsets[message.partition()] = message.offset() + 1
    producer.produce(sink, message.value(), message.key(), headers=message.headers(), on_delivery=batch.delivered)


if __name__ == "__main__":
    main()
    sys.exit(0)
