"""The ingress client numbers a run's records once each, even when a wait for acks is cancelled.

Found by a clean-clone `make test` (test_ingest_command_interrupted_publishes_abort, once in
three runs): Ctrl-C arrived while `reasonwire ingest` waited for the acknowledgement of records
the broker already held; the count of published events had not moved, so the shielded ``abort``
took the ``rw-seq`` of the first event — a conflicting record the worker dead-letters, leaving the
run open until its inactivity timeout. In-memory producer: the order of numbering and acks is the
point, not the broker.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reasonwire.contracts.envelope import HEADER_CONTROL, HEADER_SEQ, Control
from reasonwire.workers.services.ingress.records import RunEnvelope
from reasonwire.workers.services.ingress.publisher import RunPublisher


class _HeldAcks:
    """Queues every record at once; acknowledges only when the test says so."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.acks: list[asyncio.Future[None]] = []

    async def send(self, topic: str, value: bytes | None, *, key: bytes, headers: list[tuple[str, bytes]]) -> asyncio.Future[None]:
        self.sent.append(dict(headers))
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.acks.append(ack)
        return ack

    def acknowledge_all(self) -> None:
        for ack in self.acks:
            if not ack.done():
                ack.set_result(None)


async def test_a_cancelled_wait_for_acks_never_hands_an_rw_seq_out_twice() -> None:
    producer = _HeldAcks()
    run = RunPublisher(producer, RunEnvelope("anthropic-messages", "run-1", "thread-1"))  # type: ignore[arg-type]
    sending = asyncio.create_task(run.send('data: {"type":"message_start"}\n\ndata: {"type":"ping"}\n\n'))
    while len(producer.sent) < 2:
        await asyncio.sleep(0)
    sending.cancel()  # Ctrl-C while the broker's acknowledgement is on its way
    await asyncio.gather(sending, return_exceptions=True)
    closing = asyncio.create_task(run.close(Control.ABORT))  # what the cancelled run's shielded abort does
    while len(producer.sent) < 3:
        await asyncio.sleep(0)
    producer.acknowledge_all()
    await closing
    assert [h[HEADER_SEQ] for h in producer.sent] == [b"0", b"1", b"2"]
    assert producer.sent[2][HEADER_CONTROL] == b"abort"
    assert run.published == 2  # the control record's ack covers the two before it


class _SlowQueue(_HeldAcks):
    """``send`` itself waits (aiokafka does, for metadata or a full batch) from the second record on."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def send(self, topic: str, value: bytes | None, *, key: bytes, headers: list[tuple[str, bytes]]) -> asyncio.Future[None]:
        if self.sent and not self.release.is_set():
            await self.release.wait()
        return await super().send(topic, value, key=key, headers=headers)


async def test_a_cancellation_while_records_are_queued_leaves_no_gap_before_the_abort() -> None:
    """Found by review: the numbers of a whole call were taken before its records were queued,
    so Ctrl-C while ``send`` waited left records unqueued but numbered — the ``abort`` came after
    a gap (the worker ends such a run ``sequence_gap``, not aborted) and ``published`` counted
    events that never left."""
    producer = _SlowQueue()
    run = RunPublisher(producer, RunEnvelope("anthropic-messages", "run-2", "thread-2"))  # type: ignore[arg-type]
    sending = asyncio.create_task(run.send('data: {"type":"message_start"}\n\ndata: {"type":"ping"}\n\ndata: {"type":"ping"}\n\n'))
    while len(producer.sent) < 1:
        await asyncio.sleep(0)
    await asyncio.sleep(0)  # the second send is now waiting
    sending.cancel()
    await asyncio.gather(sending, return_exceptions=True)
    producer.release.set()
    closing = asyncio.create_task(run.close(Control.ABORT))
    while len(producer.sent) < 2:
        await asyncio.sleep(0)
    producer.acknowledge_all()
    await closing
    assert [h[HEADER_SEQ] for h in producer.sent] == [b"0", b"1"]
    assert producer.sent[1][HEADER_CONTROL] == b"abort"
    assert run.published == 1
