"""The chaos verifier's references: what a correct worker publishes for a run whose producer
vanished. A wrong reference turns a correct worker into a FAIL row (or hides a real loss), so
the reference is checked here against the contract it is built from: an inactivity timeout
closes a run whose ingress vanished (DESIGN, raw input record), with one terminal event after
every span is closed (R1)."""

from __future__ import annotations

import pytest

from chaos.load import Template, expiry_end, make_run, templates
from reasonwire.contracts.envelope import HEADER_CONTROL

_FIRST_STREAMS = [t for t in templates() if t.name.startswith("a_")]


def _provider_records(template: Template) -> tuple:
    run = make_run(template, "reference", 1)
    return run, [r for r in run.records if HEADER_CONTROL not in dict(r.headers)]


@pytest.mark.parametrize("template", _FIRST_STREAMS, ids=lambda t: t.grammar)
def test_a_producer_vanishing_mid_stream_is_expected_to_end_with_inactivity_timeout(template: Template) -> None:
    """A stream cut after two records: the expiry's end is ``RUN_ERROR inactivity_timeout``."""
    run, records = _provider_records(template)
    end = expiry_end(run.envelope, records[:2])
    assert (end["type"], end["code"]) == ("RUN_ERROR", "inactivity_timeout")


@pytest.mark.parametrize("template", _FIRST_STREAMS, ids=lambda t: t.grammar)
def test_a_producer_vanishing_after_the_provider_completed_is_expected_to_finish(template: Template) -> None:
    """Every provider record sent, only the end control record lost: the provider's stream had
    completed, so the run ends ``RUN_FINISHED`` (from its last record or from the expiry's
    abort), never ``RUN_ERROR``."""
    run, records = _provider_records(template)
    assert expiry_end(run.envelope, records)["type"] == "RUN_FINISHED"
