"""API keys → tenant and audiences. Keys are stored only as SHA-256 hex digests.

Key book (``RW_GATEWAY_KEYS_FILE``, a JSON file, or ``RW_GATEWAY_KEYS``, the same JSON
inline)::

    {"keys": [{"sha256": "<hex of sha256(key)>", "tenant": "acme", "audiences": ["public", "internal"]}]}

A caller presents its key as ``Authorization: Bearer <key>`` (what ``HttpAgent``'s
``headers`` option sends) or ``X-API-Key``. ``public`` is the end-user audience
(``reasoning.events.public.v1``: summaries only, never an encrypted value);
``internal`` the trusted services' stream (``reasoning.events.v1``), granted only
by a key that lists it. Hash a key with ``reasonwire gateway --hash-key KEY``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from reasonwire.contracts import topics


class Audience(StrEnum):
    PUBLIC = "public"
    INTERNAL = "internal"

    @property
    def topic(self) -> str:
        return topics.EVENTS_PUBLIC if self is Audience.PUBLIC else topics.EVENTS


@dataclass(frozen=True)
class Principal:
    """Who is calling, as far as the gateway is concerned."""

    tenant: str
    audiences: frozenset[Audience]


class KeyBookError(ValueError):
    """A key book that cannot be used; the message names the entry and the problem, never a key."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyBook:
    def __init__(self, entries: Mapping[str, Principal]) -> None:
        self._by_hash = dict(entries)

    def __len__(self) -> int:
        return len(self._by_hash)

    def principal(self, presented: str | None) -> Principal | None:
        if not presented:
            return None
        # only the digest is looked up: the table never holds a key, and a timing difference
        # reveals at most a prefix of a hash of a key
        return self._by_hash.get(hash_key(presented))

    @classmethod
    def parse(cls, text: str, *, source: str) -> KeyBook:
        try:
            doc = json.loads(text)
            raw = doc["keys"]
            entries: dict[str, Principal] = {}
            for n, entry in enumerate(raw):
                digest = str(entry["sha256"]).lower()
                if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                    raise KeyBookError(f"{source}: keys[{n}].sha256 is not a SHA-256 hex digest")
                audiences = frozenset(Audience(a) for a in entry.get("audiences", ["public"]))
                entries[digest] = Principal(tenant=str(entry["tenant"]), audiences=audiences)
        except KeyBookError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise KeyBookError(f"{source}: not a key book ({type(exc).__name__}: {exc})") from None
        return cls(entries)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> KeyBook:
        if path := env.get("RW_GATEWAY_KEYS_FILE"):
            try:
                return cls.parse(Path(path).read_text(), source=path)
            except OSError as exc:
                raise KeyBookError(f"cannot read RW_GATEWAY_KEYS_FILE {path}: {exc.strerror}") from None
        if inline := env.get("RW_GATEWAY_KEYS"):
            return cls.parse(inline, source="RW_GATEWAY_KEYS")
        return cls({})
