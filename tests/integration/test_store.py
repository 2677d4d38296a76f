"""The artefact store on the real Redis: byte-exact values, one key per value, order kept (R3, R4)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from reasonwire.contracts.artefacts import ArtefactRecord, ArtefactSubtype, Issuer, NativeBlock
from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.core.normalizer import JournalEntry, RunKey, Step
from reasonwire.workers.io.store import ArtefactStore

pytestmark = pytest.mark.integration


def _record(thread: str, position: int, value: str) -> ArtefactRecord:
    return ArtefactRecord(
        kind="gemini.part.thoughtSignature",
        subtype=ArtefactSubtype.MESSAGE,
        entity_id="resp:reasoning:0",  # one reasoning message owning two signed parts
        value=value,
        issuer=Issuer(grammar=Grammar.GEMINI_GENERATE_CONTENT, model="gemini-3-pro"),
        native=NativeBlock(position=position, block={"text": "t", "thought": True}, value_path=["thoughtSignature"]),
        run_id="run",
        thread_id=thread,
        tenant="acme",
    )


async def test_two_values_of_one_entity_are_both_kept_in_order_R4_R3(redis: Any) -> None:
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    store = ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60)
    values = ["CiQB\u00e9+/==\n first", "second/value=="]
    records = [_record(thread, 0, values[0]), _record(thread, 3, values[1])]
    await store.apply([Step(run=RunKey("acme", "run"), artefacts=records)])
    stored = await store.thread_artefacts("acme", thread)
    assert [r.value for r in stored] == values
    assert [r.native.position for r in stored] == [0, 3]
    assert await store.thread_artefacts("other-tenant", thread) == []  # tenants never see each other
    assert sorted((await store.erase_thread("acme", thread))["artefacts"]) == ["resp:reasoning:0#0", "resp:reasoning:0#3"]
    assert await store.thread_artefacts("acme", thread) == []


async def test_erasing_a_thread_removes_the_raw_journal_of_its_open_runs_P7(redis: Any) -> None:
    thread, run = f"thread-{uuid.uuid4().hex[:8]}", f"run-{uuid.uuid4().hex[:8]}"
    store = ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60)
    key = RunKey("acme", run)
    await store.apply([Step(run=key, thread_id=thread, journal_append=JournalEntry(0, b'{"type":"message_start"}'))])
    assert (await store.load_journal(key))[0] == [JournalEntry(0, b'{"type":"message_start"}')]
    assert await store.erase_thread("acme", thread) == {"artefacts": [], "journals": [run]}
    assert await store.load_journal(key) == ([], False)


async def test_closing_a_run_drops_its_journal_and_marks_where_it_ended(redis: Any) -> None:
    """The ended marker (partition:offset) is what tells a redelivered record from a late one."""
    thread, run = f"thread-{uuid.uuid4().hex[:8]}", f"run-{uuid.uuid4().hex[:8]}"
    store = ArtefactStore(redis, artefact_ttl_s=60, journal_ttl_s=60)
    key = RunKey("acme", run)
    entries = [JournalEntry(i, b'{"i":%d}' % i, "message_delta" if i else None) for i in range(3)]
    await store.apply([Step(run=key, thread_id=thread, journal_append=e) for e in entries])
    assert (await store.load_journal(key)) == (entries, False)
    await store.close_runs([Step(run=key, run_ended=True, ended_at=(4, 1017))])
    assert await store.load_journal(key) == ([], b"4:1017")
    await store.erase_thread("acme", thread)
