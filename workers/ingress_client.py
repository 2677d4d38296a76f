"""The ingress client: a producing service publishes a provider stream with one object per run.

    async with Publisher(bootstrap_servers) as publisher:
        async with publisher.run(provider="anthropic-messages", run_id=r, thread_id=t, tenant=n, model=m) as run:
            async for line in provider_response.aiter_lines():   # raw SSE lines, as the SDK hands them over
                await run.send(line)

What the run object does for the caller (the raw contract, ``contracts/envelope.py``):

* numbers ``rw-seq`` from 0 per run and sets every envelope header on every record
  (key = run id, so the run stays on one partition and in order);
* frames SSE itself (:class:`reasonwire.workers.ingress.SSEFramer`): ``send`` takes raw lines
  (``event:``/``data:``/blank) or bare ``data:`` payloads, ``feed`` takes arbitrary
  byte chunks (an HTTP body); one record per provider event, bytes unchanged;
* ``send``/``feed`` return only when the broker acknowledged the records they
  produced (``acks=all``, idempotent producer): a failure raises
  :class:`IngressError` in the caller instead of losing events silently;
* on normal exit of the ``async with`` block the ``end`` control record is
  published; on an exception or a cancellation, ``abort`` (shielded from the
  cancellation), then the exception propagates.

How to tap each provider SDK's raw stream is in ``docs/ingress.md``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from reasonwire.contracts import topics
from reasonwire.contracts.envelope import Control
from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.ingress import IngressError, OutgoingRecord, RunEnvelope, SSEFramer
from reasonwire.workers.kafka_security import client_kwargs

__all__ = ["IngressError", "Publisher", "RunPublisher"]


class RunPublisher:
    """One run's ingress: frames, numbers and publishes its provider events (see module doc).

    One call at a time (await each): a run is one ordered stream, and concurrent calls would
    interleave its records in an order the provider never sent."""

    def __init__(self, producer: AIOKafkaProducer, envelope: RunEnvelope, topic: str = topics.RAW) -> None:
        self._producer = producer
        self.envelope = envelope
        self._topic = topic
        self._framer = SSEFramer()
        self.published = 0
        """Provider events the broker acknowledged so far (control records not counted)."""
        self._next_seq = 0
        """``rw-seq`` of the next record. A number is taken when its record is queued with the
        producer — one record at a time — not when it is acknowledged: a wait for acks that is
        cancelled (Ctrl-C) leaves the record on its way, and handing its number out again would
        give the ``abort`` an ``rw-seq`` already used (the worker dead-letters it as a conflict,
        the run stays open); and a cancellation while records are still being queued leaves the
        rest unnumbered, so the ``abort`` follows the last queued one without a gap."""
        self._failed = False
        self.outcome: Control | None = None
        """``end`` or ``abort`` once the run's control record is published."""

    async def send(self, data: bytes | str) -> int:
        """One or more complete lines (raw SSE lines or bare payloads); returns the events published."""
        raw = data.encode() if isinstance(data, str) else data
        events = [e for line in (raw.split(b"\n") if raw else [b""]) for e in self._framer.line(line)]
        return await self._publish(events)

    async def feed(self, chunk: bytes) -> int:
        """An arbitrary chunk of an SSE / JSONL byte stream (a partial last line waits for the next)."""
        return await self._publish(self._framer.feed(chunk))

    async def close(self, control: Control = Control.END) -> None:
        """Flush a pending frame (only on ``end``) and publish the control record."""
        if self.outcome is not None:
            return
        if control is Control.END:
            await self._publish(self._framer.finish())
        seq = self._next_seq
        record = OutgoingRecord(self.envelope.run_id.encode(), None, self.envelope.headers(seq, control=control))
        await self._deliver([record])
        if not self._failed:  # acknowledged after everything queued before it on the run's partition (idempotent, in order)
            self.published = seq
        self.outcome = control

    async def _publish(self, events: list[tuple[bytes, str | None]]) -> int:
        if not events:
            return 0
        if self.outcome is not None:
            raise IngressError(f"run {self.envelope.run_id} already ended ({self.outcome.value})")
        key = self.envelope.run_id.encode()
        first = self._next_seq
        records = [OutgoingRecord(key, data, self.envelope.headers(first + i, sse_event=event)) for i, (data, event) in enumerate(events)]
        await self._deliver(records)
        self.published += len(records)
        return len(records)

    async def _deliver(self, records: list[OutgoingRecord]) -> None:
        """Queue each record (its ``rw-seq`` is taken once ``send`` returns), then wait for every ack.
        ``records`` are numbered from ``_next_seq`` on."""
        try:
            pending = []
            for r in records:
                pending.append(await self._producer.send(self._topic, r.value, key=r.key, headers=r.headers))
                self._next_seq += 1  # queued: see ``_next_seq``
            await asyncio.gather(*pending)
        except KafkaError as exc:
            self._failed = True
            raise IngressError(f"run {self.envelope.run_id}: the broker did not take record(s) ({type(exc).__name__})") from exc


class Publisher:
    """A Kafka producer for ``reasoning.raw.v1`` that hands out :class:`RunPublisher`s."""

    def __init__(self, bootstrap_servers: str | None = None, *, producer: AIOKafkaProducer | None = None, **producer_options: Any) -> None:
        if producer is None and bootstrap_servers is None:
            raise ValueError("Publisher needs bootstrap_servers or a started producer")
        self._own = producer is None
        self._producer = producer or AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers, acks="all", enable_idempotence=True, **{**client_kwargs(), **producer_options}
        )

    async def start(self) -> None:
        if self._own:
            await self._producer.start()

    async def stop(self) -> None:
        if self._own:
            await self._producer.stop()

    async def __aenter__(self) -> Publisher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @asynccontextmanager
    async def run(
        self,
        *,
        provider: str,
        run_id: str,
        thread_id: str | None = None,
        tenant: str = "default",
        model: str | None = None,
        issuer_scope: str | None = None,
    ) -> AsyncIterator[RunPublisher]:
        """Publish one run: ``end`` on normal exit, ``abort`` on an exception or cancellation."""
        Grammar(provider)  # an unknown grammar fails here, in the caller, not as a dead letter later
        run = RunPublisher(self._producer, RunEnvelope(provider, run_id, thread_id or run_id, tenant, model, issuer_scope))
        try:
            yield run
        except BaseException:
            await _abort(run)
            raise
        await run.close(Control.END)


async def _abort(run: RunPublisher) -> None:
    """Publish ``abort`` even while being cancelled (shielded). A broker that already failed may not
    take it either; the original exception is what the caller must see, and the normalizer's
    inactivity timeout closes such a run."""
    try:
        await asyncio.shield(run.close(Control.ABORT))
    except (IngressError, asyncio.CancelledError):
        pass
