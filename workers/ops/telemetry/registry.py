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

Registering is on the worker's hot path (every poll registers what it
publishes), so it is done in bulk: a text's slices are cut by one list
comprehension, hashed by ``map(hash, ...)`` and added by one ``set.update`` —
no Python call per slice. A text (or a stream's delta) of printable ASCII
without ``"``, ``'`` or ``\\`` renders identically three ways, which a few
C-level string checks tell, so it is sliced once, not three times. A text
arriving in pieces keeps one tail per rendering, as each rendering's slices
are aligned on that rendering's whole text; while every delta so far was plain
the three tails are one object, and the first delta that renders differently
forks it (before extending it).

The registry is bounded, in two generations: new hashes go into the *young*
set until it would hold more than ``max_slices // 2``; then it becomes the
*old* set and the previous old one is forgotten whole. So the newest
``max_slices // 2`` registered slices (less those of the one call that made
the young set rotate) are always remembered, never more than ``max_slices`` are
kept, and a slice registered again is young again. (An
insertion-ordered dict forgetting one entry per registration was the former
design: CPython dicts keep the holes of removed entries until they resize, and
finding the oldest entry scans them, so at the bound every registration paid
a scan over up to hundreds of thousands of holes.) A value seen long ago may
no longer be recognised; the allowlists of the span guard do not depend on it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator

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

def _is_plain(text: str) -> bool:
    """Whether every rendering of ``text`` is ``text`` itself, so one rendering is all three.

    Printable ASCII (space to ``~``) is left alone by JSON escaping and by a bytes ``repr``
    except ``"`` and ``\\`` (JSON) and ``'`` and ``\\`` (repr); all C-level scans."""
    return text.isascii() and text.isprintable() and '"' not in text and "'" not in text and "\\" not in text


def _renderings(text: str) -> Iterable[str]:
    """The distinct renderings of ``text``: one for plain text, without rendering it."""
    if _is_plain(text):
        return (text,)
    return dict.fromkeys(render(text) for render in RENDERINGS)


def _aligned_slices(text: str) -> list[str]:
    """The ``SLICE``-long slices of ``text`` at ``STRIDE``-aligned offsets, and its last ``SLICE``."""
    slices = [text[i : i + SLICE] for i in range(0, len(text) - SLICE + 1, STRIDE)]
    slices.append(text[-SLICE:])
    return slices


class OpaqueRegistry:
    """Hashes of aligned slices of recently handled content; thread-safe, bounded."""

    def __init__(self, *, max_slices: int = 300_000, max_needles: int = 4_096) -> None:
        self.max_slices = max_slices
        self.max_needles = max_needles
        self._young: set[int] = set()
        """Hashes of the slices registered since the last rotation (at most ``max_slices // 2``)."""
        self._old: set[int] = set()
        """The generation before (at most ``max_slices // 2``): forgotten whole at the next rotation."""
        self._needles: dict[int, tuple[int, int]] = {}
        """full-text hash → (prefix hash, length), in registration order (for eviction)."""
        self._by_prefix: dict[int, dict[int, int]] = {}
        """prefix hash → {full-text hash: length}."""
        self._streams: dict[object, _Stream] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._young) + len(self._old) + len(self._needles)

    # -- registering ------------------------------------------------------------------

    def add(self, text: str) -> None:
        """Register one whole text (an artefact value), in every rendering."""
        if len(text) < MIN_NEEDLE:
            return
        slices: list[str] = []
        needles: list[str] = []
        for rendered in _renderings(text):
            if len(rendered) < SLICE:
                needles.append(rendered)
            else:
                slices += _aligned_slices(rendered)
        hashes = list(map(hash, slices))  # outside the lock: nothing shared yet
        with self._lock:
            self._add_hashes(hashes)
            for needle in needles:
                self._add_needle(needle)

    def add_stream(self, key: object, delta: str, *, end: bool = False) -> None:
        """Register a text that arrives in pieces (the reasoning deltas of one message).

        Slices are aligned on the whole text, across deltas; ``end=True`` registers
        the tail and forgets the key.
        """
        slices: list[str] = []
        with self._lock:
            stream = self._streams.pop(key, None) or _Stream()
            stream.extend(delta, slices)
            if end:
                needles = stream.finish(slices)
            else:
                needles = []
                self._streams[key] = stream
                while len(self._streams) > self.max_needles:  # open streams are bounded too
                    self._streams.pop(next(iter(self._streams)))
            if slices:
                self._add_hashes(list(map(hash, slices)))
            for needle in needles:
                self._add_needle(needle)

    def _add_hashes(self, hashes: list[int]) -> None:
        """Register slice hashes with one C-level set update instead of a Python call per slice.

        The young generation takes them unless it would hold more than ``max_slices // 2``;
        then it becomes the old one and the old one is dropped whole: no per-slice eviction,
        and both sets together never exceed ``max_slices``. The common case counts a call's
        hashes without deduplicating them (each distinct-count costs a lookup per hash in
        the large set); before rotating, the call is deduplicated, so a repetitive text
        does not flush the registry. A call larger than a generation keeps its newest."""
        half = self.max_slices // 2
        if len(self._young) + len(hashes) <= half:
            self._young.update(hashes)
            return
        fresh = set(hashes)
        if len(self._young) + len(fresh) <= half:
            self._young |= fresh
            return
        if len(fresh) > half:
            fresh = set(list(dict.fromkeys(hashes))[len(fresh) - half :])
        self._old, self._young = self._young, fresh

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
        young, old, by_prefix = self._young, self._old, self._by_prefix
        n = len(text)
        if (young or old) and n >= SLICE:
            for i in range(n - SLICE + 1):
                h = hash(text[i : i + SLICE])
                if h in young or h in old:
                    yield max(0, i - (STRIDE - 1)), min(n, i + SLICE + STRIDE - 1)
        if by_prefix and n >= MIN_NEEDLE:
            for i in range(n - MIN_NEEDLE + 1):
                bucket = by_prefix.get(hash(text[i : i + MIN_NEEDLE]))
                if bucket:
                    for full, length in list(bucket.items()):
                        if hash(text[i : i + length]) == full:
                            yield i, i + length


class _StreamTail:
    """The unregistered end of one rendering of a text arriving in pieces (at most ``SLICE + STRIDE`` chars)."""

    __slots__ = ("buffer", "at")

    def __init__(self, buffer: str = "", at: int = 0) -> None:
        self.buffer = buffer
        """The end of the rendered text so far: from the next aligned slice, or its last ``SLICE``
        characters if that starts earlier; the whole text while it is shorter than ``SLICE``."""
        self.at = at
        """Offset in ``buffer`` of the next aligned slice to register."""

    def copy(self) -> _StreamTail:
        return _StreamTail(self.buffer, self.at)

    def extend(self, piece: str, slices: list[str]) -> None:
        """Append ``piece``; every aligned slice it completes goes to ``slices`` (one comprehension)."""
        buffer = self.buffer + piece
        last = len(buffer) - SLICE  # where the last whole slice starts (negative: none yet)
        at = self.at
        if at <= last:
            slices += [buffer[i : i + SLICE] for i in range(at, last + 1, STRIDE)]
            at += STRIDE * ((last - at) // STRIDE + 1)
        keep = max(0, min(at, last))
        self.buffer, self.at = buffer[keep:], at - keep

    def finish(self, slices: list[str]) -> str | None:
        """The text ended: its last ``SLICE`` characters go to ``slices``; a shorter text is returned (a needle)."""
        if len(self.buffer) >= SLICE:
            slices.append(self.buffer[-SLICE:])
            return None
        return self.buffer


class _Stream:
    """The tails of a message's renderings; one tail serves several while their renderings agree.

    A message's renderings stay identical as long as every delta so far was plain
    (:func:`_is_plain`), so one tail does the work of three. The first delta that renders
    differently forks the shared tail (before extending it): from there on each rendering
    keeps its own alignment, as its slices are aligned on its own whole text."""

    __slots__ = ("tails", "distinct")

    def __init__(self) -> None:
        tail = _StreamTail()
        self.tails: list[_StreamTail] = [tail] * len(RENDERINGS)
        """Rendering i's tail; the same object for renderings that still agree."""
        self.distinct: list[_StreamTail] = [tail]

    def extend(self, delta: str, slices: list[str]) -> None:
        if _is_plain(delta):
            for tail in self.distinct:
                tail.extend(delta, slices)
            return
        pieces = [render(delta) for render in RENDERINGS]
        if len(self.distinct) < len(RENDERINGS):  # some renderings still share a tail
            self.tails = _fork(self.tails, pieces)
            self.distinct = list(dict.fromkeys(self.tails))
            for tail, piece in dict.fromkeys(zip(self.tails, pieces)):
                tail.extend(piece, slices)
            return
        for tail, piece in zip(self.tails, pieces, strict=True):
            tail.extend(piece, slices)

    def finish(self, slices: list[str]) -> list[str]:
        """Register every tail's end; returns the renderings short enough to be needles."""
        return [needle for tail in self.distinct if (needle := tail.finish(slices))]


def _fork(tails: list[_StreamTail], pieces: list[str]) -> list[_StreamTail]:
    """``tails`` where renderings that shared a tail but now take different pieces get a copy each."""
    given: dict[tuple[_StreamTail, str], _StreamTail] = {}
    owned: set[_StreamTail] = set()
    out = []
    for tail, piece in zip(tails, pieces, strict=True):
        mine = given.get((tail, piece))
        if mine is None:
            mine = tail.copy() if tail in owned else tail
            owned.add(tail)
            given[tail, piece] = mine
        out.append(mine)
    return out
