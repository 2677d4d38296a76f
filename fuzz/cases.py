"""A case as a JSON file (``fuzz/findings/``, ``tests/fixtures/fuzz/``), bytes and ``str`` kept exact.

Each line records how it was fed: ``bytes`` or ``str``, as UTF-8 text when it is
valid UTF-8, else base64 (of the bytes; of a ``str`` encoded with
``surrogatepass``, so lone surrogates survive the file).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from fuzz.corpus import Line
from fuzz.oracle import Case


def _line_to_json(line: Line) -> dict[str, Any]:
    kind = "bytes" if isinstance(line.data, bytes) else "str"
    raw = line.data if isinstance(line.data, bytes) else line.data.encode("utf-8", "surrogatepass")
    try:
        out: dict[str, Any] = {kind: raw.decode("utf-8")}
    except UnicodeDecodeError:
        out = {f"{kind}_b64": base64.b64encode(raw).decode()}
    if line.sse_event is not None:
        out["sse_event"] = line.sse_event
    return out


def _line_from_json(obj: dict[str, Any]) -> Line:
    sse = obj.get("sse_event")
    if "bytes" in obj:
        return Line(obj["bytes"].encode("utf-8"), sse)
    if "bytes_b64" in obj:
        return Line(base64.b64decode(obj["bytes_b64"]), sse)
    if "str" in obj:
        return Line(obj["str"], sse)
    return Line(base64.b64decode(obj["str_b64"]).decode("utf-8", "surrogatepass"), sse)


def case_to_json(case: Case) -> dict[str, Any]:
    return {
        "grammar": case.grammar,
        "run_id": case.run_id,
        "model": case.model,
        "end": case.end,
        "audience": case.audience,
        "lines": [_line_to_json(line) for line in case.lines],
    }


def case_from_json(obj: dict[str, Any]) -> Case:
    return Case(
        grammar=obj["grammar"],
        lines=[_line_from_json(line) for line in obj["lines"]],
        run_id=obj.get("run_id"),
        model=obj.get("model"),
        end=obj.get("end", "finish"),
        audience=obj.get("audience"),
    )


def write_case(path: Path, case: Case, **facts: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**facts, "case": case_to_json(case)}, indent=1) + "\n", encoding="ascii")


def read_case(path: Path) -> tuple[Case, dict[str, Any]]:
    obj = json.loads(path.read_text(encoding="ascii"))
    return case_from_json(obj["case"]), obj
