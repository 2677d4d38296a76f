"""The arguments of :func:`reasonwire.workers.replay.replay`, checked and brought to one form.

``replay`` is public library API: a caller's mistake gets one ``TypeError`` / ``ValueError``
naming the argument and what it accepts, before any work — and the natural forms a caller holds
are taken as they are: artefact records as the dicts ``reasonwire translate --artefacts`` writes
(one JSON object per line, read with ``json.loads``), a grammar name as the target.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from reasonwire.contracts.artefacts import ArtefactRecord
from reasonwire.contracts.grammars import Grammar
from reasonwire.contracts.replay import ReplayTarget
from reasonwire.workers.core.arguments import expect, expect_optional_str, type_name

GRAMMARS = ", ".join(g.value for g in Grammar)


def replay_target(target: Any) -> ReplayTarget:
    """A :class:`ReplayTarget`, a grammar name (its model then assumed from the thread, warned), or
    the target's fields as a dict (as ``reasonwire.replay.request.v1`` carries it)."""
    if isinstance(target, ReplayTarget):
        return target
    if isinstance(target, str):
        if target not in {g.value for g in Grammar}:
            raise ValueError(f"target {target!r} is not a grammar name (known: {GRAMMARS})"[:400])
        return ReplayTarget(grammar=Grammar(target))
    if isinstance(target, Mapping):
        try:
            return ReplayTarget.model_validate(target)
        except ValidationError as exc:
            raise ValueError(f"target is not a replay target ({_first_problem(exc)})") from None
    raise TypeError(
        f"target must be a ReplayTarget, a grammar name ({GRAMMARS}) or a dict of its fields, not {type_name(target)}"
    )


def artefact_records(artefacts: Any) -> list[ArtefactRecord]:
    """The thread's records: :class:`ArtefactRecord`\\ s, or dicts as ``translate --artefacts``
    writes them (one per line). A record that is neither is named by its position, never shown."""
    if artefacts is None or isinstance(artefacts, str | bytes | Mapping) or not isinstance(artefacts, Iterable):
        raise TypeError(
            "artefacts must be a list (any iterable) of ArtefactRecord, or of dicts as `reasonwire translate "
            f"--artefacts` writes them (one per line), not {type_name(artefacts)}; [] when the thread has none"
        )
    records: list[ArtefactRecord] = []
    for index, item in enumerate(artefacts):
        if isinstance(item, ArtefactRecord):
            records.append(item)
        elif isinstance(item, Mapping):
            try:
                records.append(ArtefactRecord.model_validate(item))
            except ValidationError as exc:
                raise ValueError(f"artefacts[{index}] is not an artefact record ({_first_problem(exc)})") from None
        else:
            raise TypeError(f"artefacts[{index}] must be an ArtefactRecord or a dict of one, not {type_name(item)}")
    return records


def check_options(tenant: Any, honour_client_omissions: Any) -> None:
    expect_optional_str(tenant, name="tenant")
    expect(honour_client_omissions, bool, name="honour_client_omissions", accepts="True or False")


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"{'.'.join(str(p) for p in error['loc']) or 'value'}: {error['msg']}"
