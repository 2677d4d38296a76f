"""The delivery simulation through the real store: the production ``ArtefactStore`` and its Lua
scripts on a real Redis, for a share of the simulation's seeds.

tests/unit/test_delivery_sim.py drives the production delivery machine over an in-memory model
of the store; here the same simulation (same faults, crashes, rebalances, zombies and stalls)
performs every store action with :class:`~reasonwire.workers.io.store.ArtefactStore` — the
write script with its fence and epoch check, the journal reads, the ended markers, the index
of open runs — so a difference between the model and the store shows as a broken invariant.
One Redis database of its own, emptied per seed; one server (a cluster's writes are per slot:
tests/integration/test_cluster.py). ``RW_SIM_SEED=n`` reruns one seed.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from reasonwire.workers.core.fence import Witness
from reasonwire.workers.core.normalizer import JournalEntry, RunKey, Step
from reasonwire.workers.io.store import ArtefactStore, RunsMoved, StoreLost
from reasonwire.workers.translators import translator_for
from tests.unit import test_delivery_sim as sim

pytestmark = pytest.mark.integration

SEEDS = [int(os.environ["RW_SIM_SEED"])] if os.environ.get("RW_SIM_SEED") else range(max(1, sim.SEEDS // 10))
DATABASE = 9
"""The simulation's own database: emptied per seed, nobody else's keys in it."""


class RedisStore:
    """The simulation's store interface over real ``ArtefactStore`` clients: one per simulated
    worker (each process has its client and its witness), every call run to completion on one
    event loop (the simulation is sequential)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, url: str) -> None:
        self.loop = loop
        self.redis = Redis.from_url(url)
        self.clients: dict[int, ArtefactStore] = {}

    def _run(self, work: Any) -> Any:
        try:
            return self.loop.run_until_complete(work)
        except RunsMoved as exc:
            raise sim.Moved(list(exc.runs)) from exc
        except StoreLost as exc:
            raise sim.Gone(str(exc)) from exc

    def _client(self, witness: Witness) -> ArtefactStore:
        client = self.clients.get(id(witness))
        if client is None:
            client = self.clients[id(witness)] = ArtefactStore(self.redis, artefact_ttl_s=600, journal_ttl_s=600)
            client.witness = witness  # the simulated worker's witness is the client's
        return client

    @property
    def lost(self) -> bool:
        return any(client.loss_window() for client in self.clients.values())

    def claim(self, witness: Witness, counts: dict[str, int] | None) -> None:
        client = self._client(witness)
        if counts is None:
            self._run(client.recover_from_loss())
        else:
            self._run(client.claim_epoch(lost=bool(counts), witnessed=counts))

    def apply(self, steps: list[Step], witness: Witness, opened: Any = None) -> None:
        self._run(self._client(witness).apply(steps, opened))

    def close(self, steps: list[Step], witness: Witness) -> None:
        self._run(self._client(witness).close_runs(steps))

    def load(self, run: RunKey, witness: Witness) -> tuple[list[JournalEntry], bytes | bool]:
        [loaded] = self._run(self._client(witness).load_journals([run]))
        return loaded

    def _check(self, witness: Witness) -> None:
        self._run(self._client(witness).probe())

    def open_runs(self, partitions: tuple[int, ...]) -> dict[int, list[RunKey]]:
        found = self._run(self._client(Witness()).open_runs(partitions))
        return {p: sorted(runs) for p, runs in found.items()}


@pytest.fixture
def stub_translators(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(sys.modules[sim.__name__], "translator_for", lambda grammar, **kw: sim.StubTranslator(**kw))
    yield
    assert translator_for is not None


def _database(url: str) -> str:
    base, _, last = url.rpartition("/")
    return f"{base}/{DATABASE}" if last.isdigit() else f"{url.rstrip('/')}/{DATABASE}"


def test_the_delivery_simulation_through_the_real_store_matches_the_reference(services: dict[str, str], stub_translators: None) -> None:
    """The fault-free reference over the model; the faulty run (zombies and stalls included)
    over the real store and its scripts: the same events, dead letters and usage."""
    url = services["REDIS_URL"]
    if "cluster" in url:
        pytest.skip("one server: the simulation's store is one database")
    loop = asyncio.new_event_loop()
    store = RedisStore(loop, _database(url))
    try:
        for seed in SEEDS:
            loop.run_until_complete(store.redis.flushdb())
            store.clients.clear()
            scenario = sim._scenario(random.Random(seed))
            reference = sim.simulate(scenario, random.Random(seed), faults=False).published
            published = sim.simulate(scenario, random.Random(seed + 1), faults=True, zombies=True, store=store).published
            sim._invariants(seed, published)
            ref_events, ref_dlq, ref_usage = sim._by_identity(reference)
            events, dlq, usage = sim._by_identity(published)
            assert events == ref_events, f"seed {seed} (RW_SIM_SEED={seed}): published events differ from the accepted input's"
            assert dlq == ref_dlq and usage == ref_usage, f"seed {seed}: dead letters or usage records differ"
    finally:
        loop.run_until_complete(store.redis.aclose())
        loop.close()
