"""Mutations: hostile variants of a seed stream, all drawn from one seeded ``random.Random``.

Stream-level: drop, duplicate, swap, move, repeat and truncate events; splice in
events of another grammar. Event-level (on the parsed JSON, at a random path):
delete a key, put a value of the wrong type there (``{}``, ``[]``, ``null``,
bools, floats, huge and negative ints, long and empty strings), set an index field
(``…index``/``…Index``) out of range, nest it deeply
(up to orjson's 1,023-level parse limit), replace a string with JSON text that
is cut off, deep or not JSON (tool-call arguments are JSON inside a string),
make the discriminator a container. Byte-level: flipped bytes, invalid UTF-8,
cut lines, lone surrogates in ``str`` lines. Routing: the discriminator deleted
while the SSE event name still routes the payload, or a payload sent under
another handler's SSE name.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import orjson

from fuzz.corpus import GRAMMARS, Line, Stream, handler_names, seeds
from fuzz.oracle import Case

_DISCRIMINATOR = {"openai-responses": "type", "anthropic-messages": "type", "gemini-interactions": "event_type"}
_MODELS = (None, None, "claude-3-7-sonnet-20250219", "claude-sonnet-4-5", "deepseek.r1-v1:0", "gemini-2.5-pro", "gpt-5")
_DEPTHS = (20, 100, 127, 128, 129, 200, 253, 254, 255, 256, 300, 600, 1000, 1020)
_BIG_INTS = (
    -1,
    -(2**31),
    -(2**63),
    2**31,
    2**53 - 1,
    2**53,
    2**53 + 1,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 1,
    10**30,
)
_OUT_OF_RANGE = (-1, -2, -(2**31), -(2**31) - 1, -(2**63), -(2**64), -(10**30), 2**31, 2**53, 2**63, 2**64, 10**30)
"""Index values no provider sends: negative (a list lookup from the end) or beyond any response."""
_JSON_TEXTS = ('{"a":', "[", '{"a":1}', "NaN", "", "{}", '"x"', "1", "null", '{"a":[1,2', "}{")
_DEEP = "\x00deep\x00"
"""A placeholder string value replaced by deep nesting after encoding (no recursion in the encoder)."""


def _paths(value: Any, out: list[tuple[Any, Any]], depth: int = 0) -> None:
    """Every (container, key) slot in a parsed event, depth-first."""
    if depth > 40:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((value, k))
            _paths(v, out, depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.append((value, i))
            _paths(v, out, depth + 1)


def _hostile(rng: random.Random) -> Any:
    pick = rng.randrange(14)
    if pick == 0:
        return {}
    if pick == 1:
        return []
    if pick == 2:
        return None
    if pick == 3:
        return rng.choice((True, False))
    if pick == 4:
        return rng.choice(_BIG_INTS)
    if pick == 5:
        return rng.choice((0.5, -1.0, 1e308, -0.0, 3.0))
    if pick == 6:
        return ""
    if pick == 7:
        return "x" * rng.choice((1000, 70_000))
    if pick == 8:
        return rng.choice(("\u2028", "é", "\U0001f600", "\x00", "a\nb", "\\", '"'))
    if pick == 9:
        return {"type": rng.choice(({}, [], 1, None, "x"))}
    if pick == 10:
        return [rng.choice(({}, [], 1, "x"))]
    if pick == 11:
        return _DEEP
    if pick == 12:
        return rng.choice(_JSON_TEXTS)
    return rng.randrange(-5, 5)


class Mutator:
    """Mutations of one grammar's seeds; ``case()`` draws one hostile case."""

    def __init__(self, grammar: str, rng: random.Random) -> None:
        self.grammar = grammar
        self.rng = rng
        self.seeds = seeds(grammar)
        self.others = [s for g in GRAMMARS if g != grammar for s in seeds(g)]
        self.handlers = handler_names(grammar)
        self._ops: list[Callable[[Stream], None]] = [
            self.delete_key,
            self.delete_key,
            self.wrong_type,
            self.wrong_type,
            self.wrong_type,
            self.extreme_int,
            self.extreme_int,
            self.index_out_of_range,
            self.index_out_of_range,
            self.deep_nest,
            self.json_text,
            self.empty_string,
            self.drop_line,
            self.duplicate_line,
            self.swap_lines,
            self.move_line,
            self.truncate,
            self.repeat_block,
            self.splice,
            self.bad_bytes,
            self.lone_surrogate,
            self.route_without_type,
            self.route_elsewhere,
            self.container_type,
        ]

    def case(self) -> Case:
        rng = self.rng
        stream = list(rng.choice(self.seeds))
        for _ in range(1 + min(int(rng.expovariate(0.7)), 6)):
            if stream:
                rng.choice(self._ops)(stream)
        sse = rng.random() < 0.5
        as_str = rng.random() < 0.3
        lines = [
            Line(
                line.data.decode("utf-8", "surrogateescape") if as_str and isinstance(line.data, bytes) else line.data,
                line.sse_event if sse else None,
            )
            for line in stream
        ]
        return Case(
            grammar=self.grammar,
            lines=lines,
            run_id=None if rng.random() < 0.3 else "run-fuzz",
            model=rng.choice(_MODELS),
            end=rng.choice(("finish", "finish", "abort", "both")),
            audience=rng.choice((None, None, "summary", "none")),
        )

    # -- helpers ------------------------------------------------------------------

    def _pick(self, stream: Stream) -> int:
        return self.rng.randrange(len(stream))

    def _edit_json(self, stream: Stream, edit: Callable[[Any], Any]) -> None:
        """Parse a random line, let ``edit`` change it (returns the new root), re-encode."""
        i = self._pick(stream)
        try:
            obj = orjson.loads(stream[i].data)
        except orjson.JSONDecodeError:
            return
        try:
            stream[i] = Line(encode(edit(obj), self.rng), stream[i].sse_event)
        except RecursionError:  # an already deep line: leave it as it is
            return

    def _slot(self, obj: Any, want: Callable[[Any], bool] | None = None) -> tuple[Any, Any] | None:
        slots: list[tuple[Any, Any]] = []
        _paths(obj, slots)
        if want is not None:
            slots = [(c, k) for c, k in slots if want(c[k])]
        return self.rng.choice(slots) if slots else None

    # -- event-level ----------------------------------------------------------------

    def delete_key(self, stream: Stream) -> None:
        def edit(obj: Any) -> Any:
            slot = self._slot(obj)
            if slot is not None:
                container, key = slot
                del container[key]
            return obj

        self._edit_json(stream, edit)

    def wrong_type(self, stream: Stream) -> None:
        def edit(obj: Any) -> Any:
            slot = self._slot(obj)
            if slot is not None:
                container, key = slot
                container[key] = _hostile(self.rng)
            return obj

        self._edit_json(stream, edit)

    def extreme_int(self, stream: Stream) -> None:
        def edit(obj: Any) -> Any:
            slot = self._slot(obj, lambda v: type(v) is int)
            if slot is not None:
                container, key = slot
                container[key] = self.rng.choice(_BIG_INTS)
            return obj

        self._edit_json(stream, edit)

    def index_out_of_range(self, stream: Stream) -> None:
        """An index field (``output_index``, ``index``, ``contentBlockIndex`` …) set negative or absurdly
        large — on one event, or on every event that names the same unit (a stream whose
        ``output_index`` is a huge negative number throughout): malformed input in every grammar,
        never a lookup the safety net catches."""
        picked = self._index_slot(stream, self._pick(stream))
        if picked is None:
            return
        first, key, old = picked
        bad = self.rng.choice(_OUT_OF_RANGE)
        every = self.rng.random() < 0.7
        for i, line in enumerate(stream):
            try:
                obj = orjson.loads(line.data)
            except orjson.JSONDecodeError:
                continue
            slots: list[tuple[Any, Any]] = []
            _paths(obj, slots)
            hits = [(c, k) for c, k in slots if k == key and c[k] == old and type(c[k]) is int]
            if not hits or not every and i != first:
                continue
            for container, k in hits:
                container[k] = bad
            try:
                stream[i] = Line(encode(obj, self.rng), line.sse_event)
            except RecursionError:
                continue

    def _index_slot(self, stream: Stream, start: int) -> tuple[int, str, int] | None:
        """(line, key, value) of an integer index field on the first line from ``start`` that has one."""
        for i in [*range(start, len(stream)), *range(start)]:
            try:
                obj = orjson.loads(stream[i].data)
            except orjson.JSONDecodeError:
                continue
            slots: list[tuple[Any, Any]] = []
            _paths(obj, slots)
            found = [(k, c[k]) for c, k in slots if isinstance(k, str) and k.lower().endswith("index") and type(c[k]) is int]
            if found:
                key, value = self.rng.choice(found)
                return i, key, value
        return None

    def deep_nest(self, stream: Stream) -> None:
        def edit(obj: Any) -> Any:
            slot = self._slot(obj, lambda v: isinstance(v, (dict, list)))
            if slot is not None:
                container, key = slot
                container[key] = _DEEP
            return obj

        self._edit_json(stream, edit)

    def json_text(self, stream: Stream) -> None:
        def edit(obj: Any) -> Any:
            slot = self._slot(obj, lambda v: isinstance(v, str))
            if slot is not None:
                container, key = slot
                depth = self.rng.choice(_DEPTHS)
                deep = "[" * depth + "]" * depth
                container[key] = self.rng.choice((*_JSON_TEXTS, deep, deep[:-1], '{"a":' * 3))
            return obj

        self._edit_json(stream, edit)

    def empty_string(self, stream: Stream) -> None:
        def edit(obj: Any) -> Any:
            slot = self._slot(obj, lambda v: isinstance(v, str))
            if slot is not None:
                container, key = slot
                container[key] = ""
            return obj

        self._edit_json(stream, edit)

    def container_type(self, stream: Stream) -> None:
        key = _DISCRIMINATOR.get(self.grammar)

        def edit(obj: Any) -> Any:
            if isinstance(obj, dict):
                if key is not None:
                    obj[key] = self.rng.choice(({}, [], 1, None, True))
                elif obj:  # bedrock: the member payload; gemini: a response field
                    obj[self.rng.choice(list(obj))] = self.rng.choice(({}, [], 1, None, "x"))
            return obj

        self._edit_json(stream, edit)

    # -- stream-level -------------------------------------------------------------------

    def drop_line(self, stream: Stream) -> None:
        del stream[self._pick(stream)]

    def duplicate_line(self, stream: Stream) -> None:
        i = self._pick(stream)
        stream.insert(i, stream[i])

    def swap_lines(self, stream: Stream) -> None:
        i, j = self._pick(stream), self._pick(stream)
        stream[i], stream[j] = stream[j], stream[i]

    def move_line(self, stream: Stream) -> None:
        line = stream.pop(self._pick(stream))
        stream.insert(self.rng.randrange(len(stream) + 1), line)

    def truncate(self, stream: Stream) -> None:
        del stream[self.rng.randrange(1, len(stream) + 1) :]

    def repeat_block(self, stream: Stream) -> None:
        i = self._pick(stream)
        j = min(len(stream), i + self.rng.randrange(1, 6))
        stream[j:j] = stream[i:j] * self.rng.randrange(1, 4)

    def splice(self, stream: Stream) -> None:
        other = self.rng.choice(self.others)
        k = self.rng.randrange(len(other))
        n = self.rng.randrange(1, 4)
        stream[self.rng.randrange(len(stream) + 1) : 0] = other[k : k + n]

    # -- byte-level -----------------------------------------------------------------------

    def bad_bytes(self, stream: Stream) -> None:
        i = self._pick(stream)
        data = stream[i].data
        raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
        if not raw:
            return
        at = self.rng.randrange(len(raw))
        pick = self.rng.randrange(4)
        if pick == 0:
            raw = raw[:at] + bytes([self.rng.randrange(256)]) + raw[at + 1 :]
        elif pick == 1:
            raw = raw[:at] + self.rng.choice((b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80")) + raw[at:]
        elif pick == 2:
            raw = raw[:at]
        else:  # invalid UTF-8 inside a JSON string value, the rest intact
            quote = raw.find(b'":"')
            raw = raw[: quote + 3] + b"\xfe\xed" + raw[quote + 3 :] if quote >= 0 else raw
        stream[i] = Line(raw, stream[i].sse_event)

    def lone_surrogate(self, stream: Stream) -> None:
        i = self.rng.choice((0, self._pick(stream)))
        data = stream[i].data
        text = data.decode("utf-8", "surrogateescape") if isinstance(data, bytes) else data
        at = self.rng.randrange(len(text) + 1)
        stream[i] = Line(text[:at] + self.rng.choice(("\ud800", "\udfff", "\udcff")) + text[at:], stream[i].sse_event)

    # -- routing by SSE event name -----------------------------------------------------------

    def route_without_type(self, stream: Stream) -> None:
        """The payload loses its discriminator; its SSE name still routes it (as the worker passes it)."""
        key = _DISCRIMINATOR.get(self.grammar, "type")
        i = self._pick(stream)
        name = stream[i].sse_event or self.rng.choice(self.handlers)
        try:
            obj = orjson.loads(stream[i].data)
        except orjson.JSONDecodeError:
            obj = {}
        if isinstance(obj, dict):
            obj.pop(key, None)
        if self.rng.random() < 0.3:
            obj = {}
        try:
            stream[i] = Line(encode(obj, self.rng), name)
        except RecursionError:  # an already deep line: route it as it is
            stream[i] = Line(stream[i].data, name)

    def route_elsewhere(self, stream: Stream) -> None:
        i = self._pick(stream)
        stream[i] = Line(stream[i].data, self.rng.choice(self.handlers))


def encode(obj: Any, rng: random.Random | None = None) -> bytes:
    """JSON bytes of a mutated event: any int size, lone surrogates kept (invalid UTF-8 out),
    deep-nesting placeholders expanded."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    while _DEEP_JSON in text:
        depth = (rng or random).choice(_DEPTHS)
        opener = (rng or random).choice(("[", '{"a":'))
        closer = "]" if opener == "[" else "}"
        text = text.replace(_DEEP_JSON, opener * depth + "1" + closer * depth, 1)
    return text.encode("utf-8", "surrogatepass")


_DEEP_JSON = json.dumps(_DEEP)
