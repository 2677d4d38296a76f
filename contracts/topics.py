"""Kafka topic names (DESIGN.md, "The flow"). The ``.v1`` suffix is the contract version:
a breaking change to a record shape gets a new topic, never an in-place edit."""

from typing import Final

RAW: Final = "reasoning.raw.v1"
"""Provider event bytes, unchanged, one event per record; key = run id."""
EVENTS: Final = "reasoning.events.v1"
"""Full AG-UI event stream for trusted services; key = run id."""
EVENTS_PUBLIC: Final = "reasoning.events.public.v1"
"""Audience-filtered AG-UI stream for end-user UIs: never an encrypted value or rawEvent."""
USAGE: Final = "reasoning.usage.v1"
"""One :class:`reasonwire.contracts.usage.UsageRecord` per finished run."""
DLQ: Final = "reasoning.dlq.v1"
"""Bad input: the original bytes and headers plus a reason header."""

ALL: Final = (RAW, EVENTS, EVENTS_PUBLIC, USAGE, DLQ)

REPLAY_REQUESTS: Final = "reasoning.replay.requests.v1"
"""Replay requests (:class:`reasonwire.contracts.replay.ReplayRequest`); key = thread id."""
REPLAY_REPLIES: Final = "reasoning.replay.replies.v1"
"""Replay replies (:class:`reasonwire.contracts.replay.ReplayReply`) unless the request names another topic; key = request id."""

REPLAY: Final = (REPLAY_REQUESTS, REPLAY_REPLIES)
"""The replay worker's topics (created by the replay worker, not by the normalizer)."""

REQUESTS: Final = "reasoning.requests.v1"
"""Run requests (:class:`reasonwire.contracts.run_request.RunRequest`) from the gateway to agent services; key = thread id."""
