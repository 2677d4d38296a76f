"""Shrink a failing case while it keeps failing the same way (same finding signature).

First the lines (delta debugging, Zeller's ddmin), then how it is fed (plain
``finish``, no model), then each remaining line's JSON: greedily delete keys and
elements, replace values with simpler ones, hoist a child in place of its
container — keeping any change after which the signature still shows.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from fuzz.corpus import Line
from fuzz.mutate import _paths, encode
from fuzz.oracle import Case, run_case


def still_fails(signature: str) -> Callable[[Case], bool]:
    def test(case: Case) -> bool:
        return any(f.signature == signature for f in run_case(case).findings)

    return test


def minimize(case: Case, signature: str, *, budget: int = 3000) -> Case:
    """The smallest case found within ``budget`` runs that still shows ``signature``."""
    test = still_fails(signature)
    runs = [0]

    def check(candidate: Case) -> bool:
        if runs[0] >= budget:
            return False
        runs[0] += 1
        return test(candidate)

    case = _ddmin(case, check)
    for change in ({"end": "finish"}, {"model": None}, {"run_id": "run-fuzz"}, {"audience": None}):
        candidate = dataclasses.replace(case, **change)
        if candidate != case and check(candidate):
            case = candidate
    for i in range(len(case.lines)):
        case = _shrink_line(case, i, check)
    return case


def _ddmin(case: Case, check: Callable[[Case], bool]) -> Case:
    lines = list(case.lines)
    n = 2
    while len(lines) >= 2:
        size = max(1, len(lines) // n)
        subsets = [lines[i : i + size] for i in range(0, len(lines), size)]
        reduced = False
        for i in range(len(subsets)):
            complement = [line for j, s in enumerate(subsets) if j != i for line in s]
            if complement and check(dataclasses.replace(case, lines=complement)):
                lines, n, reduced = complement, max(n - 1, 2), True
                break
        if not reduced:
            if n >= len(lines):
                break
            n = min(len(lines), n * 2)
    return dataclasses.replace(case, lines=lines)


def _shrink_line(case: Case, i: int, check: Callable[[Case], bool]) -> Case:
    line = case.lines[i]
    try:
        obj = orjson.loads(line.data)
    except orjson.JSONDecodeError:
        return case
    improved = True
    while improved:
        improved = False
        for candidate in _simpler(obj):
            try:
                data: bytes | str = encode(candidate)
            except RecursionError:
                continue
            if isinstance(line.data, str):
                data = data.decode("utf-8", "surrogateescape")
            lines = list(case.lines)
            lines[i] = Line(data, line.sse_event)
            trial = dataclasses.replace(case, lines=lines)
            if check(trial):
                case, obj, improved = trial, candidate, True
                break
    return case


def _simpler(obj: Any) -> Iterator[Any]:
    """Candidates one step simpler than ``obj`` (fresh copies; ``obj`` is never changed)."""
    slots: list[tuple[Any, Any]] = []
    _paths(obj, slots)
    try:
        text = encode(obj)
        json.loads(text)
    except RecursionError:  # too deep to copy in Python: left as it is
        return
    for n in range(len(slots)):
        for action in ("delete", "hoist", "null", "zero", "empty"):
            copy = json.loads(text)  # stdlib: ints of any size stay ints
            copy_slots: list[tuple[Any, Any]] = []
            _paths(copy, copy_slots)
            container, key = copy_slots[n]
            value = container[key]
            if action == "delete":
                del container[key]
            elif action == "hoist" and isinstance(value, (dict, list)) and value:
                container[key] = next(iter(value.values())) if isinstance(value, dict) else value[0]
            elif action == "null" and value is not None:
                container[key] = None
            elif action == "zero" and type(value) is int and value not in (0, 1):
                container[key] = 0
            elif action == "empty" and isinstance(value, str) and len(value) > 1:
                container[key] = value[: len(value) // 2]
            else:
                continue
            yield copy

