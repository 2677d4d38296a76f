"""A bounded registry of recently seen content, so a guard can recognise it in any text (P8).

Theory of operation
-------------------
The guards cannot rely on code never putting content into a log line or a span:
a third-party library formats an exception whose message carries a Redis
command's arguments, or logs a record it sends (aiokafka does, at DEBUG). So
the worker *registers* the content it handles — every opaque artefact value,
every ``encryptedValue``, the readable reasoning it publishes — and the guards
ask this registry whether a text contains any of it.

Nothing readable is kept: the registry holds the process-local ``hash()`` of
24-character slices taken at 4-character-aligned offsets of each registered
text (plus the text's last 24 characters). Any substring of a registered text
that is at least ``SLICE + STRIDE - 1`` = 27 characters long contains one whole
aligned slice, so scanning every 24-character window of a candidate text finds
it; a hit is widened by ``STRIDE - 1`` characters on each side, which covers
the unaligned head and tail of the leaked stretch. Texts shorter than a slice
(but at least ``MIN_NEEDLE`` characters) are kept whole, as *needles*, by hash
too, bucketed by the hash of their first ``MIN_NEEDLE`` characters so one pass
over the candidate finds them all. Shorter texts are not registered: redacting
every 5-character string that ever appeared in a stream would redact ordinary
words.

Content rarely leaks verbatim: it leaks inside a JSON payload or the ``repr``
of the bytes a client sends. Each text is therefore registered in three
renderings — as is, JSON-string-escaped, and as the body of a Python bytes
``repr`` of its UTF-8 JSON form — so escaped newlines and quotes and
``\\x``-escaped UTF-8 bytes do not hide a stretch of it.

The registry is bounded (oldest entries are forgotten first), so a value seen
long ago may no longer be recognised; the allowlists of the span guard do not
depend on it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import orjson

SLICE = 24
"""Length of a registered slice."""
STRIDE = 4
"""Slices start at offsets that are multiples of this."""
MIN_NEEDLE = 8
"""Shorter texts are not registered at all (they would redact ordinary words)."""
REDACTED = "[redacted]"

_BYTE_REPR = [chr(b) if 32 <= b < 127 else f"\\x{b:02x}" for b in range(256)]
_BYTE_REPR[ord("\\")] = "\\\\"
_BYTE_REPR[ord("'")] = "\\'"
_BYTE_REPR[ord("\t")], _BYTE_REPR[ord("\n")], _BYTE_REPR[ord("\r")] = "\\t", "\\n", "\\r"


def _json_escaped(text: str) -> str:
    try:
        return orjson.dumps(text).decode()[1:-1]
    except orjson.JSONEncodeError:  # a lone surrogate: no JSON encoder emits it, nothing to find
        return text


def _bytes_repr(text: str) -> str:
    """How ``repr(b'...')`` shows this text's UTF-8 JSON form (single-quoted: JSON contains ``"``).

    CPython's own ``bytes.__repr__`` (C) escapes exactly like the table below; it picks double
    quotes only for bytes with a ``'`` and no ``"``, whose ``'`` then needs the escape the
    single-quoted form has. ``_BYTE_REPR`` stays as the definition (tests compare)."""
    body = repr(_json_escaped(text).encode("utf-8", "surrogatepass"))
    return body[2:-1] if body[1] == "'" else body[2:-1].replace("'", "\\'")


RENDERINGS: tuple[Callable[[str], str], ...] = (str, _json_escaped, _bytes_repr)
"""Each is character-wise, so rendering the pieces of a text renders the text."""


class OpaqueRegistry:
    """Hashes of aligned slices of recently handled content; thread-safe, bounded."""

    def __init__(self, *, max_slices: int = 300_000, max_needles: int = 4_096) -> None:
        self.max_slices = max_slices
        self.max_needles = max_needles
        self._slices: dict[int, None] = {}
        self._needles: dict[int, tuple[int, int]] = {}
        """full-text hash → (prefix hash, length), in registration order (for eviction)."""
        self._by_prefix: dict[int, dict[int, int]] = {}
        """prefix hash → {full-text hash: length}."""
        self._streams: dict[object, list[_StreamTail]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._slices) + len(self._needles)

    # -- registering ------------------------------------------------------------------

    def add(self, text: str) -> None:
        """Register one whole text (an artefact value), in every rendering."""
        if len(text) < MIN_NEEDLE:
            return
        with self._lock:
            for rendered in {render(text) for render in RENDERINGS}:
                if len(rendered) < SLICE:
                    self._add_needle(rendered)
                    continue
                for start in range(0, len(rendered) - SLICE + 1, STRIDE):
                    self._add_slice(rendered[start : start + SLICE])
                self._add_slice(rendered[-SLICE:])

    def add_stream(self, key: object, delta: str, *, end: bool = False) -> None:
        """Register a text that arrives in pieces (the reasoning deltas of one message).

        Slices are aligned on the whole text, across deltas; ``end=True`` registers
        the tail and forgets the key.
        """
        with self._lock:
            tails = self._streams.pop(key, None) or [_StreamTail() for _ in RENDERINGS]
            for render, tail in zip(RENDERINGS, tails, strict=True):
                tail.extend(render(delta), self._add_slice)
                if end:
                    tail.finish(self._add_slice, self._add_needle)
            if end:
                return
            self._streams[key] = tails
            while len(self._streams) > self.max_needles:  # open streams are bounded too
                self._streams.pop(next(iter(self._streams)))

    def _add_slice(self, piece: str) -> None:
        h = hash(piece)
        self._slices.pop(h, None)
        self._slices[h] = None
        while len(self._slices) > self.max_slices:
            self._slices.pop(next(iter(self._slices)))

    def _add_needle(self, text: str) -> None:
        if len(text) < MIN_NEEDLE:
            return
        full, prefix = hash(text), hash(text[:MIN_NEEDLE])
        self._needles.pop(full, None)
        self._needles[full] = (prefix, len(text))
        self._by_prefix.setdefault(prefix, {})[full] = len(text)
        while len(self._needles) > self.max_needles:
            old, (old_prefix, _) = next(iter(self._needles.items()))
            del self._needles[old]
            bucket = self._by_prefix.get(old_prefix, {})
            bucket.pop(old, None)
            if not bucket:
                self._by_prefix.pop(old_prefix, None)

    # -- finding ----------------------------------------------------------------------

    def contains(self, text: str) -> bool:
        return next(self._hits(text), None) is not None

    def redact(self, text: str) -> str:
        """``text`` with every registered stretch replaced by ``[redacted]``."""
        spans = sorted(self._hits(text))
        if not spans:
            return text
        merged: list[list[int]] = []
        for start, stop in spans:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], stop)
            else:
                merged.append([start, stop])
        out, cursor = [], 0
        for start, stop in merged:
            out += [text[cursor:start], REDACTED]
            cursor = stop
        out.append(text[cursor:])
        return "".join(out)

    def _hits(self, text: str) -> Iterator[tuple[int, int]]:
        slices, by_prefix = self._slices, self._by_prefix
        n = len(text)
        if slices and n >= SLICE:
            for i in range(n - SLICE + 1):
                if hash(text[i : i + SLICE]) in slices:
                    yield max(0, i - (STRIDE - 1)), min(n, i + SLICE + STRIDE - 1)
        if by_prefix and n >= MIN_NEEDLE:
            for i in range(n - MIN_NEEDLE + 1):
                bucket = by_prefix.get(hash(text[i : i + MIN_NEEDLE]))
                if bucket:
                    for full, length in list(bucket.items()):
                        if hash(text[i : i + length]) == full:
                            yield i, i + length


class _StreamTail:
    """The unregistered end of a text arriving in pieces (at most ``SLICE + STRIDE`` chars)."""

    __slots__ = ("buffer", "start", "next_slice")

    def __init__(self) -> None:
        self.buffer = ""
        self.start = 0
        """Offset of ``buffer[0]`` in the whole text."""
        self.next_slice = 0
        """Offset of the next aligned slice to register."""

    def extend(self, delta: str, add_slice: Callable[[str], None]) -> None:
        self.buffer += delta
        end = self.start + len(self.buffer)
        while self.next_slice + SLICE <= end:
            at = self.next_slice - self.start
            add_slice(self.buffer[at : at + SLICE])
            self.next_slice += STRIDE
        keep_from = max(self.start, min(self.next_slice, end - SLICE))
        self.buffer = self.buffer[keep_from - self.start :]
        self.start = keep_from

    def finish(self, add_slice: Callable[[str], None], add_needle: Callable[[str], None]) -> None:
        end = self.start + len(self.buffer)
        if end >= SLICE:
            add_slice(self.buffer[-SLICE:])
        elif end >= MIN_NEEDLE:
            add_needle(self.buffer)
