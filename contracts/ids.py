"""The one grammar of run and thread ids, for every way in.

A run id is a record key, a Kafka header, a Redis key part and a URL path segment
(``/v1/threads/{threadId}/runs/{runId}/events``). An id that cannot survive all four
— a ``/`` (the path decodes ``%2F`` before routing), a ``.``/``..`` segment (clients
normalize it away), a non-ASCII character (HTTP headers are read as latin-1), a
space or a control character — would be acknowledged and then never readable. So
every way in (the Python ingress client, ``reasonwire ingest``, ``POST
/v1/ingest``, ``POST /v1/agent``, the gateway's read routes) refuses it with the
same line before anything is published, and every accepted id round-trips.

The grammar: 1 to 128 characters of ``A–Z a–z 0–9 _ - . : @ ~``, the first a
letter, a digit or ``_``. UUIDs, ULIDs and the providers' own ids (``resp_…``,
``msg_…``) fit.
"""

from __future__ import annotations

import re
from typing import Final

ID_PATTERN: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@~-]{0,127}")
ID_GRAMMAR: Final = "1-128 of A-Z a-z 0-9 _ - . : @ ~, starting with a letter, digit or _"


class BadId(ValueError):
    """An id outside :data:`ID_PATTERN`; the message names which id, never echoes it."""


def check_id(what: str, value: str) -> str:
    """``value`` if it fits the grammar, else :class:`BadId` naming ``what`` (``run id``, …)."""
    if not ID_PATTERN.fullmatch(value):
        raise BadId(f"the {what} must be {ID_GRAMMAR}")
    return value
