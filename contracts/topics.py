"""Kafka topic names (DESIGN.md, "The flow"). The ``.v1`` suffix is the contract version:
a breaking change to a record shape gets a new topic, never an in-place edit.

Plain module names, not ``Final``: mypyc (the compiled core, ``tools/build_native.py``) copies
a ``Final`` value into the compiled code at build time, and a process that renames its topics
(the benchmark's per-kind prefixes, ``bench/worker_main.py``) must reach the compiled
normalizer too."""

RAW = "reasoning.raw.v1"
"""Provider event bytes, unchanged, one event per record; key = run id."""
EVENTS = "reasoning.events.v1"
"""Full AG-UI event stream for trusted services; key = run id."""
EVENTS_PUBLIC = "reasoning.events.public.v1"
"""Audience-filtered AG-UI stream for end-user UIs: never an encrypted value or rawEvent."""
USAGE = "reasoning.usage.v1"
"""One :class:`reasonwire.contracts.usage.UsageRecord` per finished run."""
DLQ = "reasoning.dlq.v1"
"""Bad input: the original bytes and headers plus a reason header."""

ALL = (RAW, EVENTS, EVENTS_PUBLIC, USAGE, DLQ)

REPLAY_REQUESTS = "reasoning.replay.requests.v1"
"""Replay requests (:class:`reasonwire.contracts.replay.ReplayRequest`); key = thread id."""
REPLAY_REPLIES = "reasoning.replay.replies.v1"
"""Replay replies (:class:`reasonwire.contracts.replay.ReplayReply`) unless the request names another topic; key = request id."""

REPLAY = (REPLAY_REQUESTS, REPLAY_REPLIES)
"""The replay worker's topics (created by the replay worker, not by the normalizer)."""

REQUESTS = "reasoning.requests.v1"
"""Run requests (:class:`reasonwire.contracts.run_request.RunRequest`) from the gateway to agent services; key = thread id."""
