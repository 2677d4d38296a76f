"""Replay against the real Redis: a thread's artefacts are read for one tenant only (R8).

Redis keys are tenant-namespaced (``rw:v1:{tenant/thread}:…``): reading a thread as
another tenant finds nothing, so another tenant's opaque state can never reach a
request — whatever the thread id.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayTarget
from tests.conformance.oracle import LOCAL_FIXTURES
from tests.unit.test_replay_roundtrip import (
    client_history,
    expected_of,
    expected_request_items,
    replay_items,
    request_model,
    tool_results,
    translate,
    user_text,
)
from reasonwire.workers.core.normalizer import RunKey, Step
from reasonwire.workers.replay import ProviderWouldReject, replay
from reasonwire.workers.io.replay_sources import read_thread
from reasonwire.workers.io.store import ArtefactStore

pytestmark = pytest.mark.integration

FIXTURE = LOCAL_FIXTURES / "anthropic-messages" / "b_reasoning_then_tool_call.jsonl"


async def test_replay_reads_only_its_own_tenants_artefacts_R8(redis: Any) -> None:
    grammar = Grammar.ANTHROPIC_MESSAGES
    thread, run_id = f"thread-{uuid.uuid4().hex[:8]}", f"run-{uuid.uuid4().hex[:8]}"
    out = translate(FIXTURE, run_id=run_id, thread_id=thread)
    store = ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60)
    acme = [a.model_copy(update={"tenant": "acme"}) for a in out.artefacts]
    await store.apply([Step(run=RunKey("acme", run_id), thread_id=thread, artefacts=acme)])
    expected, items = expected_of(FIXTURE), replay_items(FIXTURE) or []
    history = client_history(out, grammar, user_text(grammar, expected, items), tool_results(grammar, items))
    target = ReplayTarget(grammar=grammar, model=request_model(expected))
    try:
        mine = await read_thread(store, "acme", thread)
        assert [a.value for a in mine] == [a.value for a in out.artefacts]
        result = replay(history, mine, target, tenant="acme")
        assert result.fragment["messages"] == expected_request_items(FIXTURE)

        theirs = await read_thread(store, "globex", thread)  # same thread id, another tenant
        assert theirs == []
        with pytest.raises(ProviderWouldReject):
            replay(history, theirs, target, tenant="globex")

        keys = [k.decode() async for k in redis.scan_iter(match=f"*{thread}*")]
        assert keys and all(k.startswith("rw:v1:{acme/") for k in keys)
    finally:
        await store.erase_thread("acme", thread)
