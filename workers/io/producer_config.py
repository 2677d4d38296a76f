"""What every producer of the product sends with, once: durability.

``acks=all`` and idempotence: on a replicated cluster a broker lost mid-stream loses no
acknowledged record (``min.insync.replicas=2`` of 3, contracts/topic_plan.py), and a send the
client retries is not written twice (each partition keeps its order across retries). The
normalizer's two producers, the replay worker's broker, the gateway's and the ingress's
producers and ``demo`` take these settings from here; each adds only what is its own (linger).
"""

from __future__ import annotations

from typing import Any, Final

DURABLE: Final[dict[str, Any]] = {"acks": "all", "enable_idempotence": True}
"""Keyword arguments of ``AIOKafkaProducer`` and FastStream's ``KafkaBroker`` alike."""
