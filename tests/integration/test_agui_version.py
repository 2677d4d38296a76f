"""``RW_AGUI_VERSION=1.1`` through the normalizer worker on a real Kafka broker and Redis server:
every encrypted value the worker publishes carries its ``encryptedValueType`` and every event is
valid AG-UI 1.1; the stream is otherwise the offline translator's, event for event."""

from __future__ import annotations

from typing import Any

import pytest

from reasonwire.contracts.artefacts import encrypted_value_type
from tests.integration.conftest import Collector, send
from tests.integration.test_normalizer_worker import FIXTURES, _offline, _run
from tests.unit.test_agui_1_1 import validator

pytestmark = pytest.mark.integration

SAMPLES = [p for p in FIXTURES if p.stem.startswith(("a_", "b_"))]
"""The two sample cases of every grammar (the closed providers' carry encrypted values)."""


async def test_a_worker_at_agui_1_1_types_every_encrypted_value(spawn_worker: Any, producer: Any, primed_group: Any) -> None:
    worker = spawn_worker({"RW_AGUI_VERSION": "1.1"})
    worker.wait_assigned()
    runs = [(path, *_run(path, "v11")) for path in SAMPLES]
    for _, _, records in runs:
        await send(producer, records)
    async with Collector(primed_group.kafka_bootstrap_servers) as c:
        await c.until(lambda c: all(c.finished(run.run_id) for _, run, _ in runs))
    typed, announced = 0, 0
    for path, run, _ in runs:
        offline = _offline(path, run)
        kinds = {(r.subtype.value, r.entity_id, r.value): encrypted_value_type(r.kind, r.issuer.provider) for r in offline.artefacts}
        stream = c.stream(run.run_id)
        for event in stream:
            assert list(validator().iter_errors(event)) == [], (path.name, event["type"])
            if event["type"] == "REASONING_ENCRYPTED_VALUE":
                assert event["encryptedValueType"] == kinds[(event["subtype"], event["entityId"], event["encryptedValue"])]
                typed += 1
        assert [{k: v for k, v in e.items() if k != "encryptedValueType"} for e in stream] == offline.events, path.name
        announced += sum(e["type"] == "REASONING_ENCRYPTED_VALUE" for e in offline.events)
    assert typed == announced > len(runs) // 2
