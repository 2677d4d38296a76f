"""Run one case through a translator as the worker would, and say what is wrong with it.

The checks, in order (each failure is a :class:`Finding` with a stable signature,
so many hits of one bug count as one):

* ``crash`` — an exception escaped ``feed`` / ``finish`` / ``abort`` or the
  worker's serialization of their outputs (``event_json``, ``record_json`` of
  artefacts and of the usage record);
* ``safety_net`` — the translator's last-resort catch turned an unexpected
  exception into ``RUN_ERROR`` ``internal_error``: the run survived, the bug is
  still a bug;
* ``model`` — an event does not validate as the ``ag_ui.core`` ``Event`` union
  once on the wire (usage counts limited to 0 … 2^53−1 included);
* ``agui`` — ``ag-ui-validate`` reports an error or warning for the stream
  (``--fail-on warning``; info-level notes such as AGUI902 "no timestamps"
  are not failures);
* ``invariant`` — our own stream rules the validator does not state: the
  stream starts with ``RUN_STARTED``, ends with exactly one terminal event,
  the translator says the run ended once input ended, and no id or tool
  name is empty (the models accept ``""``; it names nothing).

With ``Case.audience`` set, the audience-filtered stream the worker publishes
for end users is serialized and validated the same way (signatures prefixed
``public-``).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import orjson
from ag_ui.core import Event
from ag_ui_validate import ValidatorOptions, create_validator
from pydantic import TypeAdapter, ValidationError

from reasonwire.contracts.policy import AudienceRule, ReasoningVisibility
from fuzz.corpus import Line
from reasonwire.workers.core.audience import AudienceFilter
from reasonwire.workers.core.wire import event_json, record_json
from reasonwire.workers.translators import translator_for

_REPO = Path(__file__).resolve().parents[1]
_TERMINAL = ("RUN_FINISHED", "RUN_ERROR")
_NAMES = ("threadId", "runId", "messageId", "toolCallId", "toolCallName", "entityId")
SAFETY_NET_CODE = "internal_error"


@dataclass
class Case:
    """One fuzz input: the stream and how it is fed."""

    grammar: str
    lines: list[Line]
    run_id: str | None = "run-fuzz"
    """None exercises the fallback run id (the first line's hash)."""
    model: str | None = None
    end: str = "finish"
    """``finish`` (input ended), ``abort`` (connection dropped), or ``both`` (abort then finish)."""
    audience: str | None = None
    """Also check the stream a public audience gets (``summary`` / ``none`` reasoning visibility,
    no encrypted values) through the worker's ``AudienceFilter``; None: trusted stream only."""


@dataclass(frozen=True)
class Finding:
    kind: str
    signature: str
    detail: str


@dataclass
class Result:
    findings: list[Finding] = field(default_factory=list)
    events_in: int = 0
    events_out: int = 0
    seconds: float = 0.0


@cache
def _event_adapter() -> TypeAdapter[Any]:
    return TypeAdapter(Event)


def _where(exc: BaseException) -> str:
    """The innermost frame of ours (workers/, contracts/) the exception passed through."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        path = Path(frame.filename)
        if _REPO in path.parents and path.parts[len(_REPO.parts)] in ("workers", "contracts"):
            return f"{path.relative_to(_REPO)}:{frame.lineno}"
    last = frames[-1] if frames else None
    return f"{Path(last.filename).name}:{last.lineno}" if last else "?"


def _crash(stage: str, exc: BaseException) -> Finding:
    name = type(exc).__name__
    return Finding("crash", f"crash:{stage}:{name}:{_where(exc)}", f"{stage}: {name}: {str(exc)[:200]}")


def run_case(case: Case) -> Result:
    """Translate, serialize and check one case; never raises."""
    result = Result()
    started = time.perf_counter()
    try:
        _run(case, result)
    finally:
        result.seconds = time.perf_counter() - started
    return result


def _run(case: Case, result: Result) -> None:
    translator = translator_for(case.grammar, run_id=case.run_id, model=case.model)
    blobs: list[bytes] = []
    warnings: list[Any] = []

    def take(out: Any, stage: str) -> bool:
        warnings.extend(out.warnings)
        try:
            for event in out.events:
                blobs.append(event_json(event))
            for record in out.artefacts:
                record_json(record)
        except Exception as exc:  # noqa: BLE001 - the finding is the point
            result.findings.append(_crash(f"serialize-{stage}", exc))
            return False
        return True

    for line in case.lines:
        result.events_in += 1
        try:
            out = translator.feed(line.data, sse_event=line.sse_event)
        except Exception as exc:  # noqa: BLE001
            result.findings.append(_crash("feed", exc))
            return
        if not take(out, "feed"):
            return
    ends = {"finish": ("finish",), "abort": ("abort",), "both": ("abort", "finish")}[case.end]
    for end in ends:
        try:
            out = translator.finish() if end == "finish" else translator.abort()
        except Exception as exc:  # noqa: BLE001
            result.findings.append(_crash(end, exc))
            return
        if not take(out, end):
            return
    if not translator.ended:
        result.findings.append(Finding("invariant", "invariant:not-ended", "the run is not ended after end of input"))
        return
    try:
        record_json(translator.usage_record(tenant="fuzz"))
    except Exception as exc:  # noqa: BLE001
        result.findings.append(_crash("serialize-usage", exc))
        return
    for warning in warnings:
        if warning.code == SAFETY_NET_CODE:
            result.findings.append(Finding("safety_net", f"safety_net:{warning.message}", warning.message))
    result.events_out = len(blobs)
    _check_events(blobs, result)
    if case.audience is not None:
        _check_audience(case.audience, blobs, result)


def _check_audience(visibility: str, blobs: list[bytes], result: Result) -> None:
    """The end-user stream: the worker filters the wire events, then serializes what passes."""
    audience = AudienceFilter(AudienceRule(reasoning=ReasoningVisibility(visibility), encrypted_values=False))
    public: list[bytes] = []
    try:
        for blob in blobs:
            kept = audience.admit(orjson.loads(blob))
            if kept is not None:
                public.append(event_json(kept))
    except Exception as exc:  # noqa: BLE001
        result.findings.append(_crash("audience", exc))
        return
    found = Result()
    _check_events(public, found)
    result.findings += [Finding(f.kind, f"public-{f.signature}", f.detail) for f in found.findings]


def _check_events(blobs: list[bytes], result: Result) -> None:
    adapter = _event_adapter()
    validator = create_validator(ValidatorOptions())
    types = []
    for i, blob in enumerate(blobs):
        try:
            adapter.validate_json(blob)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"][1:])  # [0] is the union tag
            kind = orjson.loads(blob).get("type")
            result.findings.append(
                Finding("model", f"model:{kind}:{loc}:{first['type']}", f"event {i} ({kind}): {loc}: {first['msg']}")
            )
        event = orjson.loads(blob)
        types.append(event.get("type"))
        validator.feed(event)
        for name in _NAMES:
            if event.get(name) == "":
                result.findings.append(Finding("invariant", f"invariant:empty-{name}", f"event {i} ({types[-1]}): empty {name}"))
    validator.finalize()
    report = validator.report()
    for diag in report.diagnostics:
        if diag.severity in ("error", "warning"):
            result.findings.append(Finding("agui", f"agui:{diag.rule}", f"event {diag.event_index}: {diag.message[:200]}"))
    for problem in report.internal_errors:
        result.findings.append(Finding("agui", "agui:internal-error", problem.splitlines()[-1][:200]))
    if not types or types[0] != "RUN_STARTED":
        result.findings.append(Finding("invariant", "invariant:no-run-started", "first event is not RUN_STARTED"))
    terminals = sum(1 for t in types if t in _TERMINAL)
    if terminals != 1 or types[-1] not in _TERMINAL:
        result.findings.append(
            Finding("invariant", "invariant:terminal", f"{terminals} terminal events, last is {types[-1] if types else None}")
        )
