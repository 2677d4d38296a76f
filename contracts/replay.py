"""Replay over Kafka: ``reasonwire.replay.request.v1`` in, ``reasonwire.replay.reply.v1`` out.

A calling service about to make the next provider request for a thread sends
the thread's history as it holds it (an AG-UI ``RunAgentInput``, or a bare
``messages`` array, wire shape) and the target it will call; the replay worker
answers with the provider-native fragment to put in that request (P5), built
from the history and the thread's stored artefacts — only those the target's
issuer produced (R8). Requests go to ``reasoning.replay.requests.v1`` keyed by
thread id; the reply goes to ``reply_to`` (default
``reasoning.replay.replies.v1``) keyed by ``request_id``, which is how a caller
matches it. Field names are snake_case like every reasonwire record; the
history inside is AG-UI's own camelCase wire shape, untouched.

A reply never carries an opaque value outside ``fragment`` (P8): warnings and
errors name entity ids and reasons, never values.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reasonwire.contracts.grammars import Grammar

REQUEST_SCHEMA: Literal["reasonwire.replay.request.v1"] = "reasonwire.replay.request.v1"
REPLY_SCHEMA: Literal["reasonwire.replay.reply.v1"] = "reasonwire.replay.reply.v1"


class ReplayTarget(BaseModel):
    """Where the next request goes: opaque state is replayed only to its issuer (R8)."""

    model_config = ConfigDict(frozen=True)

    grammar: Grammar
    """The wire grammar of the next request; artefacts of another grammar are never sent."""
    model: str | None = None
    """The model of the next request. Artefacts of another model family are left out;
    absent means "the model that produced the thread's latest artefacts" (said in a warning)."""
    scope: str | None = None
    """Account / key / region / endpoint as configured, compared with the issuer's scope as is."""
    provider: str | None = None
    """The provider and model family the next request goes to, where the grammar is spoken by
    many (see :attr:`reasonwire.contracts.artefacts.Issuer.provider`); compared with the
    issuer's as is."""


class ReplayRequest(BaseModel):
    """One replay request (``reasoning.replay.requests.v1``, key = thread id)."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: Literal["reasonwire.replay.request.v1"] = Field(default=REQUEST_SCHEMA, alias="schema")
    """Contract version; a worker refuses a request it does not understand."""
    request_id: str = Field(min_length=1)
    """Chosen by the caller; the reply's key and ``request_id``."""
    tenant: str = "default"
    """Storage namespace: only this tenant's artefacts are read, never another's."""
    thread_id: str | None = None
    """The thread whose artefacts are read; defaults to the history's ``threadId``."""
    target: ReplayTarget
    history: dict[str, Any] | list[Any]
    """``RunAgentInput`` or a bare ``messages`` array, as the client holds it (AG-UI wire shape)."""
    honour_client_omissions: bool = False
    """True for a client that keeps encrypted values and applies R5: a message it holds
    without a value had the value withdrawn, so the stored copy is not used either."""
    reply_to: str | None = None
    """Topic for the reply; default ``reasoning.replay.replies.v1``."""


class ReplayIssue(BaseModel):
    """A warning or the error of a replay: a code, a content-free message, the entity (P8)."""

    code: str
    message: str
    entity_id: str | None = None


class ReplayReply(BaseModel):
    """One replay reply (``reply_to`` topic, key = request id)."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: Literal["reasonwire.replay.reply.v1"] = Field(default=REPLY_SCHEMA, alias="schema")
    request_id: str
    ok: bool
    """False when the replay failed before any provider call: see ``error``."""
    fragment: dict[str, Any] | None = None
    """The provider-native fragment: ``{"input": …}``, ``{"messages": …}`` or ``{"contents": …}``."""
    error: ReplayIssue | None = None
    """Why no fragment: ``invalid_request``, ``invalid_history``, ``provider_would_reject``, …"""
    warnings: list[ReplayIssue] = Field(default_factory=list)
    """What was left out and why (foreign issuer, incomplete, withdrawn, …)."""
    counters: dict[str, int] = Field(default_factory=dict)
