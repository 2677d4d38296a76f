"""``python -m bench.faststream_passthrough``: the passthrough written the way the worker is.

The same FastStream app shape as ``reasonwire.workers.services.normalizer`` — ``KafkaBroker(acks="all",
linger_ms=2)``, a batch subscriber (``max_records=RW_MAX_BATCH``,
``batch_timeout_ms=20``, ``AckPolicy.NACK_ON_ERROR``), outputs published with
``broker.publish(..., no_confirm=True)`` and gathered before the batch is
acknowledged — but the handler only re-publishes each record unchanged. Set
against the bare aiokafka passthrough it shows what the framework costs; set
against the worker, what translation, Redis and the audiences cost.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from faststream import AckPolicy, FastStream
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    source, sink = os.environ["RW_BENCH_SOURCE"], os.environ["RW_BENCH_SINK"]
    broker = KafkaBroker(os.environ["KAFKA_BOOTSTRAP_SERVERS"], log_level=logging.DEBUG, acks="all", linger_ms=2)

    @broker.subscriber(
        source,
        group_id=os.environ["RW_GROUP_ID"],
        batch=True,
        max_records=int(os.environ.get("RW_MAX_BATCH", "200")),
        batch_timeout_ms=20,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.NACK_ON_ERROR,
    )
    async def on_raw(body: Any, msg: KafkaMessage) -> None:
        raw = msg.raw_message if isinstance(msg.raw_message, tuple) else (msg.raw_message,)
        pending = [
            await broker.publish(r.value, sink, key=r.key, headers={k: v.decode() for k, v in r.headers}, no_confirm=True)
            for r in raw
        ]
        if pending:
            await asyncio.gather(*pending)

    asyncio.run(FastStream(broker).run())


if __name__ == "__main__":
    main()
