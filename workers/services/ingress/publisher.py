"""The ingress client: a producing service publishes a provider stream with one object per run.

    async with Publisher(bootstrap_servers) as publisher:
        async with publisher.run(provider="anthropic-messages", run_id=r, thread_id=t, tenant=n, model=m) as run:
            async for line in provider_response.aiter_lines():   # raw SSE lines, as the SDK hands them over
                await run.send(line)

What the run object does for the caller (the raw contract, ``contracts/envelope.py``):

* numbers ``rw-seq`` from 0 per run and sets every envelope header on every record
  (key = run id, so the run stays on one partition and in order);
* frames SSE itself (:class:`reasonwire.workers.services.ingress.records.SSEFramer`): ``send`` takes raw lines
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
from reasonwire.contracts.ids import check_id
from reasonwire.workers.core.arguments import expect, expect_optional_str, type_name
from reasonwire.workers.services.ingress.records import EventTooLarge, IngressError, OutgoingRecord, RunEnvelope, SSEFramer
from reasonwire.workers.services.ingress.recognition import GrammarGate, MalformedEvent, NotThisGrammar, gate_for
from reasonwire.workers.io.kafka_security import client_kwargs
from reasonwire.workers.core.translator import Translation
from reasonwire.workers.io.sse import ProviderEvent
from reasonwire.workers.io.producer_config import DURABLE

__all__ = ["EventTooLarge", "IngressError", "MalformedEvent", "NotThisGrammar", "Publisher", "RunPublisher", "check_capture"]

Event = tuple[bytes, str | None]
"""One provider event as it is published: its payload bytes and SSE event name."""


class RunPublisher:
    """One run's ingress: frames, numbers and publishes its provider events (see module doc).

    One call at a time (await each): a run is one ordered stream, and concurrent calls would
    interleave its records in an order the provider never sent."""

    def __init__(
        self,
        producer: AIOKafkaProducer,
        envelope: RunEnvelope,
        topic: str = topics.RAW,
        *,
        check_grammar: bool = False,
        max_event_bytes: int | None = None,
        deliver_timeout_s: float | None = None,
    ) -> None:
        self._producer = producer
        self.envelope = envelope
        self._topic = topic
        self._framer = SSEFramer(max_event_bytes)
        self._gate: GrammarGate[Event] | None = gate_for(envelope.grammar) if check_grammar else None
        """Holds the first events until the grammar is recognised (:mod:`reasonwire.workers.services.ingress.recognition`):
        a stream of another grammar, or no event at all, raises :class:`NotThisGrammar` before any record;
        then checks every event as the worker's translator will: one it would reject (not JSON, not
        the grammar) raises :class:`MalformedEvent` before its record, instead of a run the worker
        ends ``malformed_event`` with every later record dead-lettered."""
        self._deliver_timeout_s = deliver_timeout_s
        """The longest wait for the broker's acknowledgement (None: the producer's own timeouts)."""
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
        self._closing = False
        """The control record is on its way: an ``abort`` after it would end the run twice."""
        self.outcome: Control | None = None
        """``end`` or ``abort`` once the run's control record is published."""

    async def send(self, data: bytes | str) -> int:
        """One or more complete lines (raw SSE lines or bare payloads); returns the events published."""
        expect(data, (bytes, str), name="send() data", accepts="the provider's raw lines as bytes or str")
        raw = data.encode() if isinstance(data, str) else data
        events = [e for line in (raw.split(b"\n") if raw else [b""]) for e in self._framer.line(line)]
        return await self._publish(events)

    async def feed(self, chunk: bytes) -> int:
        """An arbitrary chunk of an SSE / JSONL byte stream (a partial last line waits for the next)."""
        expect(chunk, (bytes, bytearray), name="feed() chunk", accepts="bytes of the provider's response body")
        return await self._publish(self._framer.feed(bytes(chunk)))

    async def close(self, control: Control = Control.END) -> None:
        """Flush a pending frame (only on ``end``) and publish the control record."""
        if self.outcome is not None:
            return
        if control is Control.END:
            await self._publish(self._framer.finish())
            if self._gate is not None:
                await self._publish(_accepted(self._gate.finish()), checked=True)
        elif self._next_seq == 0:
            self.outcome = control  # nothing was published: there is no run to abort
            return
        self._closing = True
        seq = self._next_seq
        record = OutgoingRecord(self.envelope.run_id.encode(), None, self.envelope.headers(seq, control=control))
        await self._deliver([record], wait=not self._failed)  # after a failure: queued behind the rest, not awaited
        if not self._failed:  # acknowledged after everything queued before it on the run's partition (idempotent, in order)
            self.published = seq
        self.outcome = control

    async def _publish(self, events: list[Event], *, checked: bool = False) -> int:
        if not checked:
            lines = self._framer.take_lines(len(events))
            if self._gate is not None:
                events, refused = _released(self._gate, events, lines)
                if refused is not None:
                    await self._publish(events, checked=True)  # the events before it go out; the run is then aborted
                    raise refused
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

    async def _deliver(self, records: list[OutgoingRecord], *, wait: bool = True) -> None:
        """Queue each record (its ``rw-seq`` is taken once ``send`` returns), then wait for every ack
        — at most ``deliver_timeout_s`` in all. ``records`` are numbered from ``_next_seq`` on."""
        loop = asyncio.get_running_loop()
        deadline = None if self._deliver_timeout_s is None else loop.time() + self._deliver_timeout_s
        try:
            pending = []
            for r in records:
                queued = self._producer.send(self._topic, r.value, key=r.key, headers=r.headers)
                pending.append(await (queued if deadline is None else asyncio.wait_for(queued, max(0.0, deadline - loop.time()))))
                self._next_seq += 1  # queued: see ``_next_seq``
            if not wait:
                return
            if deadline is not None:  # asyncio.wait, not wait_for: the producer's futures are never cancelled
                _, late = await asyncio.wait(pending, timeout=max(0.0, deadline - loop.time()))
                if late:
                    raise TimeoutError
            await asyncio.gather(*pending)
        except KafkaError as exc:
            self._failed = True
            raise IngressError(f"run {self.envelope.run_id}: the broker did not take record(s) ({type(exc).__name__})") from exc
        except TimeoutError:
            self._failed = True
            raise IngressError(
                f"run {self.envelope.run_id}: the broker did not acknowledge within {self._deliver_timeout_s:g}s", retryable=True
            ) from None


class Publisher:
    """A Kafka producer for ``reasoning.raw.v1`` that hands out :class:`RunPublisher`s."""

    def __init__(
        self,
        bootstrap_servers: str | None = None,
        *,
        producer: AIOKafkaProducer | None = None,
        deliver_timeout_s: float | None = None,
        **producer_options: Any,
    ) -> None:
        if producer is None and bootstrap_servers is None:
            raise ValueError("Publisher needs bootstrap_servers or a started producer")
        if bootstrap_servers is not None and not (
            isinstance(bootstrap_servers, str)
            or (isinstance(bootstrap_servers, list) and all(isinstance(b, str) for b in bootstrap_servers))
        ):
            raise TypeError(f"bootstrap_servers must be 'host:port[,host:port…]' or a list of them, not {type_name(bootstrap_servers)}")
        if deliver_timeout_s is not None:
            expect(deliver_timeout_s, (int, float), name="deliver_timeout_s", accepts="a number of seconds or None")
        self._own = producer is None
        self.deliver_timeout_s = deliver_timeout_s
        """Each send/close waits at most this long for the broker (None: the producer's own timeouts)."""
        self._producer = producer or AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers, **{**DURABLE, **client_kwargs(), **producer_options}
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
        issuer_provider: str | None = None,
        check_grammar: bool = False,
        max_event_bytes: int | None = None,
    ) -> AsyncIterator[RunPublisher]:
        """Publish one run: ``end`` on normal exit, ``abort`` on an exception or cancellation.

        ``check_grammar``: hold the first events until ``provider``'s translator recognises one;
        a stream of another grammar or without events raises :class:`NotThisGrammar`, nothing
        published. ``max_event_bytes``: a larger event raises :class:`EventTooLarge` before it is
        sent. A run or thread id outside the id grammar (``reasonwire.contracts.ids``) raises
        :class:`~reasonwire.contracts.ids.BadId` here, before anything, as does an ``issuer_provider``
        (``deepseek``, ``ollama:qwen3``, …: who issued the run's reasoning state, for a grammar many
        providers speak; ``contracts/issuers.py``) outside that grammar."""
        known = ", ".join(g.value for g in Grammar)
        expect(provider, str, name="provider", accepts=f"a grammar name ({known})")
        if provider not in {g.value for g in Grammar}:  # here, in the caller, not as a dead letter later
            raise ValueError(f"provider {provider!r} is not a grammar name (known: {known})"[:400])
        expect(run_id, str, name="run_id", accepts="a string")
        optional = (("thread_id", thread_id), ("model", model), ("issuer_scope", issuer_scope), ("issuer_provider", issuer_provider))
        for name, value in optional:
            expect_optional_str(value, name=name)
        expect(tenant, str, name="tenant", accepts="a string")
        expect(check_grammar, bool, name="check_grammar", accepts="True or False")
        if max_event_bytes is not None:
            expect(max_event_bytes, int, name="max_event_bytes", accepts="a number of bytes (int) or None")
        check_id("run id", run_id)
        check_id("thread id", thread_id or run_id)
        if issuer_provider is not None:
            check_id("issuer provider", issuer_provider)
        run = RunPublisher(
            self._producer,
            RunEnvelope(provider, run_id, thread_id or run_id, tenant, model, issuer_scope, issuer_provider),
            check_grammar=check_grammar,
            max_event_bytes=max_event_bytes,
            deliver_timeout_s=self.deliver_timeout_s,
        )
        try:
            yield run
            await run.close(Control.END)  # may still frame a last event (too large, or not this grammar)
        except BaseException:
            await _abort(run)
            raise


def _released(gate: GrammarGate[Event], events: list[Event], lines: list[int]) -> tuple[list[Event], MalformedEvent | None]:
    """What may be published of ``events`` (each checked by ``gate``), and the refusal of the
    first one the grammar's translator rejects, if any (nothing from it on is published)."""
    out: list[Event] = []
    for event, line in zip(events, lines, strict=True):
        for translation, item in gate.feed(ProviderEvent(line, event[0], event[1]), event):
            if translation.rejection is not None:
                return out, MalformedEvent(line, translation.rejection.reason)
            out.append(item)
    return out, None


def _accepted(held: list[tuple[Translation, Event]]) -> list[Event]:
    """The events still held at the end of a recognised stream (none of them rejected: a rejected
    event is what recognises a stream, and it is refused when it is fed)."""
    return [item for _, item in held]


def check_capture(provider: str, data: bytes) -> None:
    """A whole capture checked before any of it is published: raises :class:`NotThisGrammar` or
    :class:`MalformedEvent` (naming the line) exactly as publishing it with ``check_grammar``
    would, so a file that would fail half-way publishes nothing."""
    gate: GrammarGate[Event] | None = gate_for(provider)
    if gate is None:
        return
    framer = SSEFramer()
    for events in (framer.feed(data), framer.finish()):
        _, refused = _released(gate, events, framer.take_lines(len(events)))
        if refused is not None:
            raise refused
    gate.finish()


async def _abort(run: RunPublisher) -> None:
    """Publish ``abort`` even while being cancelled (shielded). A broker that already failed may not
    take it either; the original exception is what the caller must see, and the normalizer's
    inactivity timeout closes such a run."""
    if run._closing:  # noqa: SLF001 - the end record was already queued
        return
    try:
        await asyncio.shield(run.close(Control.ABORT))
    except (IngressError, asyncio.CancelledError):
        pass
