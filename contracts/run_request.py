"""Run requests: ``reasonwire.run.request.v1`` on ``reasoning.requests.v1`` (key = thread id).

The gateway turns an AG-UI ``POST /v1/agent`` (a ``RunAgentInput``) into one of
these for the agent service that owns the thread (thread id as key: one
partition, so one consumer of an agent-service group, sees a thread's turns in
order). The agent service answers by publishing the provider's stream for
``run_id`` through the ingress (``reasonwire.workers.services.ingress.publisher``); the gateway streams
that run's normalized events back to the caller. The tenant is the caller's, as
authenticated by the gateway — never taken from the body.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA: Literal["reasonwire.run.request.v1"] = "reasonwire.run.request.v1"


class RunRequest(BaseModel):
    """One run request. Field names are snake_case like every reasonwire record; ``input`` is
    AG-UI's own camelCase ``RunAgentInput`` wire shape, untouched (encrypted values included)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    schema_: Literal["reasonwire.run.request.v1"] = Field(default=SCHEMA, alias="schema")
    """Contract version; an agent service refuses a request it does not understand."""
    tenant: str = Field(min_length=1)
    """The authenticated caller's tenant: the agent publishes the run under it (rw-tenant)."""
    thread_id: str = Field(min_length=1)
    """``input.threadId``; the record key."""
    run_id: str = Field(min_length=1)
    """``input.runId``; the agent must publish the provider stream under this run id."""
    audience: str
    """The audience the caller streams (``public`` or ``internal``), for the agent's information."""
    input: dict[str, Any]
    """The ``RunAgentInput`` as the client sent it."""
    requested_at_ms: int
    """When the gateway accepted the request (epoch ms)."""
