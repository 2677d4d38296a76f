"""The adapter decides nothing: on the real broker and Redis, every delivery I/O the
worker makes — a journal read, a store write, an ended marker, a probe, a send, a commit, a
seek — happens while it performs an action the delivery machine returned, and with exactly that
action's content. A decision taken in the adapter (a write the machine did not ask for, a send
of other outputs, a commit of other offsets) fails this test."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

from tests.conformance.oracle import LOCAL_FIXTURES, assert_valid_stream, translate_file
from tests.integration.conftest import Collector, send
from reasonwire.workers.services import normalizer as normalize
from reasonwire.workers.core import delivery_machine as dm
from reasonwire.workers.services.ingress.records import RunEnvelope, raw_records
from reasonwire.workers.services.normalizer_app import create_app
from reasonwire.workers.ops.settings import WorkerSettings
from reasonwire.workers.io.sse import read_events
from reasonwire.workers.ops.telemetry import setup_telemetry

pytestmark = pytest.mark.integration

FIXTURE = LOCAL_FIXTURES / "openai-responses" / "b_reasoning_then_tool_call.jsonl"


class _Audit:
    """Every action the machine returned, and every I/O call checked against the one performed."""

    def __init__(self) -> None:
        self.returned: set[int] = set()
        self.calls: list[str] = []
        self.violations: list[str] = []

    def returns(self, method: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            actions = method(*args, **kwargs)
            self.returned.update(id(a) for a in actions)
            return actions

        return wrapped

    def check(self, kind: type, name: str, same: Any = None) -> dm.Action | None:
        action = normalize._performing.get()
        self.calls.append(name)
        if not isinstance(action, kind):
            self.violations.append(f"{name} outside a {kind.__name__} action (performing {type(action).__name__})")
            return None
        if id(action) not in self.returned:
            self.violations.append(f"{name} for a {kind.__name__} the machine never returned")
        if same is not None and not same(action):
            self.violations.append(f"{name} with other content than its {kind.__name__}")
        return action

    def io(self, target: Any, attr: str, kind: type, same: Any = None, sync: bool = False) -> None:
        real = getattr(target, attr)
        if sync:
            def wrapped_sync(*args: Any, **kwargs: Any) -> Any:
                self.check(kind, attr, (lambda a: same(a, *args)) if same else None)
                return real(*args, **kwargs)
            setattr(target, attr, wrapped_sync)
            return

        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.check(kind, attr, (lambda a: same(a, *args)) if same else None)
            return await real(*args, **kwargs)

        setattr(target, attr, wrapped)


_INPUTS = frozenset({"poll", "journals_read", "open_runs_read", "done", "failed", "tick", "broker_answered", "assigned", "revoke", "stall", "close"})
"""The machine's inputs: each returns the actions the adapter may perform."""


class _AuditedMachine:
    """The worker's machine behind a stand-in whose inputs record the actions they return (the
    compiled machine's methods cannot be replaced on the instance); everything else passes through."""

    def __init__(self, machine: Any, audit: _Audit) -> None:
        self._machine = machine
        self._audit = audit

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._machine, name)
        return self._audit.returns(value) if name in _INPUTS else value


async def test_every_delivery_io_is_an_action_the_machine_returned(primed_group: WorkerSettings, producer: Any) -> None:
    run = RunEnvelope("openai-responses", f"adapter-{uuid.uuid4().hex[:8]}", f"thread-{uuid.uuid4().hex[:6]}", tenant="acme")
    with FIXTURE.open() as f:
        records = list(raw_records(run, read_events(f)))
    telemetry = setup_telemetry(install_global=False, env={})
    app, worker = create_app(dataclasses.replace(primed_group, inactivity_timeout_s=120), telemetry)
    audit = _Audit()
    worker.machine = _AuditedMachine(worker.machine, audit)  # type: ignore[assignment]
    store = worker.store
    failures: list[int] = []
    real_apply = store.apply

    async def apply_failing_once(steps: Any, opened: Any = None) -> int:  # one store failure: the rewind, the probe, the seek
        if not failures and any(s.run_ended for s in steps):
            failures.append(1)
            raise ConnectionError("Redis went away")
        return await real_apply(steps, opened)

    store.apply = apply_failing_once  # type: ignore[method-assign]
    audit.io(store, "apply", dm.Write, lambda a, steps, opened=None: tuple(steps) == a.steps and opened is a.opened)
    audit.io(store, "open_runs", dm.ReadOpenRuns, lambda a, partitions: tuple(partitions) == a.partitions)
    audit.io(store, "close_runs", dm.Close, lambda a, steps: tuple(steps) == a.steps)
    audit.io(store, "load_journals", dm.ReadJournals, lambda a, runs: tuple(runs) == a.runs)
    audit.io(store, "probe", dm.Probe)
    audit.io(store, "recover_from_loss", dm.RecoverStore)
    try:
        await app.start()
        assert worker.outbox is not None
        audit.io(worker.outbox, "add", dm.Send, lambda a, outbound: outbound is a.outbound, sync=True)
        await send(producer, records[:2])
        async with Collector(primed_group.kafka_bootstrap_servers) as c:
            await c.until(lambda c: worker.consumer is not None and bool(c.stream(run.run_id)), timeout=60)
            consumer = worker.consumer
            audit.io(consumer, "commit", dm.Commit, lambda a, offsets: {tp.partition: o for tp, (o, _) in offsets.items()} == dict(a.offsets))
            audit.io(consumer, "seek", dm.Seek, lambda a, tp, offset: a.offsets.get(tp.partition) == offset, sync=True)
            await send(producer, records[2:])
            await c.until(lambda c: c.finished(run.run_id), timeout=90)
    finally:
        await app.stop()
        telemetry.log_guard.uninstall()
    stream = c.stream(run.run_id)
    assert stream == translate_file(run.grammar, FIXTURE, run_id=run.run_id, thread_id=run.thread_id).events
    assert_valid_stream(stream)
    assert failures, "the store failure did not happen: the rewind path was not exercised"
    assert {"apply", "close_runs", "load_journals", "probe", "add", "commit", "seek"} <= set(audit.calls), audit.calls
    assert audit.violations == []
