"""The gateway's pure parts: a run log's order and de-duplication, SSE framing, the key book."""

from __future__ import annotations

import asyncio
import json

import orjson
import pytest

from reasonwire.workers.services.gateway.fanout import RunLog, partition_for, sse_frame
from reasonwire.workers.services.gateway.keys import Audience, KeyBook, KeyBookError, hash_key


def _blob(kind: str, **fields: object) -> bytes:
    return orjson.dumps({"type": kind, **fields})


def test_a_run_log_keeps_the_first_copy_of_each_seq_and_releases_seqs_in_order() -> None:
    log = RunLog("acme", "t1")
    assert log.add(1, _blob("TEXT_MESSAGE_START", messageId="m")) is False  # held: 0 missing
    assert log.add(0, _blob("RUN_STARTED")) is True
    assert log.add(0, _blob("RUN_STARTED", copy=2)) is False
    assert log.add(2, _blob("RUN_FINISHED")) is True
    assert log.types == ["RUN_STARTED", "TEXT_MESSAGE_START", "RUN_FINISHED"]
    assert log.frames[0] == sse_frame(0, _blob("RUN_STARTED"))
    assert log.duplicates == 1 and log.ended


def test_sse_frame_is_agui_sse_encoding_with_the_seq_as_id() -> None:
    from ag_ui.core import RunStartedEvent
    from ag_ui.encoder import EventEncoder

    event = RunStartedEvent(thread_id="t", run_id="r")
    blob = event.model_dump_json(by_alias=True).encode()
    assert sse_frame(7, blob) == b"id: 7\n" + EventEncoder().encode(event).encode()


def test_the_public_log_never_serves_an_encrypted_value_R8() -> None:
    log = RunLog("acme", "t1")
    log.add(0, _blob("RUN_STARTED"))
    log.add(1, _blob("REASONING_ENCRYPTED_VALUE", subtype="message", entityId="m", encryptedValue="x"), filter_encrypted=True)
    log.add(2, _blob("RUN_FINISHED"))

    async def read() -> list[bytes]:
        return [frame async for frame in log.follow(-1, keepalive_s=1)]

    frames = b"".join(asyncio.run(read())).split(b"\n\n")[:-1]
    assert [json.loads(f.split(b"data: ")[1])["type"] for f in frames] == ["RUN_STARTED", "RUN_FINISHED"]


def test_follow_resumes_after_an_id_and_waits_with_keep_alives_until_the_terminal_event() -> None:
    async def scenario() -> list[bytes]:
        log = RunLog("acme", "t1")
        for seq, kind in enumerate(["RUN_STARTED", "STEP_STARTED", "STEP_FINISHED"]):
            log.add(seq, _blob(kind, stepName="s") if "STEP" in kind else _blob(kind))
        out: list[bytes] = []

        async def reader() -> None:
            async for frame in log.follow(0, keepalive_s=0.05):
                out.append(frame)

        task = asyncio.create_task(reader())
        await asyncio.sleep(0.2)
        log.add(3, _blob("RUN_FINISHED"))
        await asyncio.wait_for(task, 2)
        return out

    out = asyncio.run(scenario())
    frames = b"".join(out).split(b"\n\n")[:-1]
    assert [int(f.split(b"\n")[0][4:]) for f in frames if f.startswith(b"id:")] == [1, 2, 3]
    assert b": keep-alive" in frames


# Kafka's own murmur2 test vectors (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java)
JAVA_MURMUR2 = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}


@pytest.mark.parametrize("partitions", [1, 4, 8, 12])
def test_partition_for_is_the_java_clients_default_partitioner(partitions: int) -> None:
    """Any producer (Java, librdkafka with murmur2_random, aiokafka) puts key K on toPositive(murmur2(K)) % N."""
    for key, murmur in JAVA_MURMUR2.items():
        assert partition_for(key, partitions) == (murmur & 0x7FFFFFFF) % partitions


def test_the_key_book_holds_hashes_only_and_maps_a_key_to_tenant_and_audiences() -> None:
    book = KeyBook.parse(json.dumps({"keys": [{"sha256": hash_key("s3cret"), "tenant": "acme", "audiences": ["public", "internal"]}]}), source="test")
    principal = book.principal("s3cret")
    assert principal is not None and principal.tenant == "acme" and Audience.INTERNAL in principal.audiences
    assert book.principal("other") is None and book.principal(None) is None
    with pytest.raises(KeyBookError, match=r"keys\[0\].sha256"):
        KeyBook.parse(json.dumps({"keys": [{"sha256": "s3cret", "tenant": "acme"}]}), source="test")


def test_a_value_that_is_not_a_json_object_takes_its_seq_but_is_never_served() -> None:
    log = RunLog("acme", "t1")
    assert log.add(0, _blob("RUN_STARTED")) is True
    assert log.add(1, b"\x00not json") is True
    assert log.add(2, b"[1, 2]") is True
    assert log.add(3, _blob("RUN_FINISHED")) is True
    assert log.frames[1] == log.frames[2] == b"" and log.ended
