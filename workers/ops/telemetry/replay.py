"""The replay side's metric: artefacts left out of a replay, by reason (R8, P5).

The replay core counts what it leaves out (``ReplayResult.counters``, keyed by
its warning codes); :meth:`ReplayTelemetry.record` turns the codes that mean
"an artefact was dropped" into data points of ``reasonwire.replay.artefacts.dropped``.
Entity ids, issuers and values never become labels: only the provider and the
reason, from a fixed vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping

from reasonwire.contracts.grammars import Grammar
from reasonwire.workers.ops.telemetry import Telemetry
from reasonwire.workers.ops.telemetry import vocabulary as v


class ReplayTelemetry:
    def __init__(self, telemetry: Telemetry) -> None:
        self.dropped = telemetry.counter(
            "reasonwire.replay.artefacts.dropped",
            unit="{artefact}",
            description="Stored artefacts left out of a replay, by reason (foreign issuer, tenant, incomplete, ...)",
        )

    def record(self, grammar: Grammar, counters: Mapping[str, int]) -> None:
        """Count one replay's drops; ``counters`` is the replay result's counter map."""
        for code, count in counters.items():
            if code in v.REPLAY_DROP_REASONS:
                self.dropped.add(count, {v.GEN_AI_PROVIDER_NAME: grammar.provider_name, v.RW_REPLAY_DROP_REASON: code})
