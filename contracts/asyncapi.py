"""The AsyncAPI 3.0 document of reasonwire's topics, built from ``contracts/`` (``reasonwire asyncapi``).

Why not FastStream's generator (``faststream docs gen`` / ``AsyncAPI(broker).to_specification()``):
in FastStream 0.7 a message has a payload taken from the handler's type annotation and no
headers (its ``Message`` schema object has no ``headers`` field) and no Kafka key binding.
Our channels carry raw provider bytes whose meaning is in the ``rw-*`` headers and the record
key (the run id decides the partition, so the order), and the worker's handler takes undecoded
records — FastStream would describe one channel with an empty payload. So the document is
built here, from the same contracts the code uses: topic names (:mod:`reasonwire.contracts.topics`), their
plan (:mod:`reasonwire.contracts.topic_plan`), the header names (:mod:`reasonwire.contracts.envelope`) and the
pydantic models' JSON schemas. The worker and replay worker still are FastStream apps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, TypeAdapter

from reasonwire.contracts import envelope, topic_plan, topics

ASYNCAPI_VERSION: Final = "3.0.0"
_REF: Final = "#/components/schemas/{model}"


@dataclass(frozen=True)
class Header:
    name: str
    description: str
    required: bool = False


_ENVELOPE: Final = (
    Header(envelope.HEADER_RUN_ID, "the run; equals the record key", True),
    Header(envelope.HEADER_PROVIDER, "the provider grammar (reasonwire.contracts.grammars.Grammar)", True),
    Header(envelope.HEADER_SEQ, "0-based position of the event within the run (duplicates, gaps)", True),
    Header(envelope.HEADER_THREAD_ID, "the conversation (default: the run id)"),
    Header(envelope.HEADER_TENANT, "namespace of stored state (default: default)"),
    Header(envelope.HEADER_MODEL, "the requested model (part of the artefact issuer)"),
    Header(envelope.HEADER_ISSUER_SCOPE, "account / key / region the provider binds artefacts to"),
    Header(envelope.HEADER_ISSUER_PROVIDER, "the provider behind a grammar many providers speak (deepseek, glm, ollama:<model>, …)"),
    Header(envelope.HEADER_SSE_EVENT, "the SSE event: name, when the ingress saw one"),
    Header(envelope.HEADER_CONTROL, "marks a control record without provider bytes: end or abort"),
)
_OUTPUT: Final = (
    Header(envelope.HEADER_RUN_ID, "the run; equals the record key", True),
    Header(envelope.HEADER_THREAD_ID, "the conversation", True),
    Header(envelope.HEADER_TENANT, "the tenant", True),
    Header(envelope.HEADER_PROVIDER, "the provider grammar", True),
    Header(envelope.HEADER_EVENT_SEQ, "0-based index of the AG-UI event within its run (dedupe, order)", True),
    Header("content-type", "application/json", True),
)


@dataclass(frozen=True)
class Channel:
    """One topic as the document describes it."""

    topic: str
    message: str
    summary: str
    content_type: str
    payload: dict[str, Any]
    headers: tuple[Header, ...]
    action: str
    """``send`` or ``receive``: what reasonwire's workers do on it."""
    operation: str


def _model(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, Any]:
    return _adapter(TypeAdapter(model), schemas)


def _adapter(adapter: TypeAdapter[Any], schemas: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema, its ``$defs`` hoisted into ``components.schemas`` (refs point there)."""
    schema = _asyncapi_schema(adapter.json_schema(ref_template=_REF, mode="serialization"))
    schemas.update(schema.pop("$defs", {}))
    return schema


def _asyncapi_schema(node: Any) -> Any:
    """pydantic writes OpenAPI's ``discriminator: {propertyName, mapping}``; an AsyncAPI schema
    object's ``discriminator`` is the property name alone (the ``oneOf`` next to it stays)."""
    if isinstance(node, dict):
        out = {k: _asyncapi_schema(v) for k, v in node.items()}
        if isinstance(out.get("discriminator"), dict):
            out["discriminator"] = out["discriminator"]["propertyName"]
        return out
    if isinstance(node, list):
        return [_asyncapi_schema(v) for v in node]
    return node


_BINARY: Final = {"type": "string", "format": "binary", "description": "provider event bytes, unchanged"}


def channels(schemas: dict[str, Any]) -> list[Channel]:
    """Every topic of :mod:`reasonwire.contracts.topics` with its message; fills ``schemas``."""
    from ag_ui.core import Event

    from reasonwire.contracts.replay import ReplayReply, ReplayRequest
    from reasonwire.contracts.run_request import RunRequest
    from reasonwire.contracts.usage import UsageRecord

    event = _adapter(TypeAdapter(Event), schemas)
    schemas["AgUiEvent"] = event
    ref = {"$ref": "#/components/schemas/AgUiEvent"}
    return [
        Channel(topics.RAW, "RawProviderEvent", "one provider stream event (or a control record)", "application/octet-stream", _BINARY, _ENVELOPE, "receive", "normalize"),
        Channel(topics.EVENTS, "AgUiEvent", "one AG-UI 1.0 event, every field (trusted services)", "application/json", ref, _OUTPUT, "send", "publishEvents"),
        Channel(topics.EVENTS_PUBLIC, "AgUiPublicEvent", "one AG-UI 1.0 event filtered for end users (no encrypted value, no rawEvent)", "application/json", ref, _OUTPUT, "send", "publishPublicEvents"),
        Channel(topics.USAGE, "UsageRecord", "token usage of one finished run", "application/json", _model(UsageRecord, schemas), _OUTPUT[:4], "send", "publishUsage"),
        Channel(
            topics.DLQ,
            "DeadLetter",
            "a raw record that could not be processed: its original bytes and headers, plus a reason",
            "application/octet-stream",
            _BINARY,
            (*(Header(h.name, h.description) for h in _ENVELOPE), Header(envelope.HEADER_REASON, "why it was dead-lettered", True)),
            "send",
            "deadLetter",
        ),
        Channel(topics.REPLAY_REQUESTS, "ReplayRequest", "a replay request (key: thread id)", "application/json", _model(ReplayRequest, schemas), (), "receive", "replay"),
        Channel(topics.REPLAY_REPLIES, "ReplayReply", "a replay reply (key: request id)", "application/json", _model(ReplayReply, schemas), (), "send", "replyReplay"),
        Channel(topics.REQUESTS, "RunRequest", "a run request from the gateway to an agent service (key: thread id)", "application/json", _model(RunRequest, schemas), (), "send", "requestRun"),
    ]


def _headers(headers: tuple[Header, ...]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {h.name: {"type": "string", "description": h.description} for h in headers},
        "required": [h.name for h in headers if h.required],
        "additionalProperties": True,
    }


def _channel_id(topic: str) -> str:
    return topic.replace(".", "_")


def document(*, version: str, servers: str = "localhost:9092", partitions: int = 8, replication: int = 1) -> dict[str, Any]:
    """The AsyncAPI 3.0 document: one channel per topic (its Kafka binding from the topic plan),
    one message per channel (key, headers, payload schema), one operation per channel."""
    schemas: dict[str, Any] = {}
    roles = {r.name: r for r in topic_plan.ROLES}
    specs = {s.name: s for s in topic_plan.plan(partitions, replication)}
    doc_channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for ch in channels(schemas):
        cid, role, spec = _channel_id(ch.topic), roles[ch.topic], specs[ch.topic]
        message: dict[str, Any] = {
            "name": ch.message,
            "title": ch.message,
            "summary": ch.summary,
            "contentType": ch.content_type,
            "payload": ch.payload,
            "bindings": {"kafka": {"key": {"type": "string", "description": role.key}, "bindingVersion": "0.5.0"}},
        }
        if ch.headers:
            message["headers"] = _headers(ch.headers)
        messages[ch.message] = message
        doc_channels[cid] = {
            "address": ch.topic,
            "title": ch.topic,
            "description": role.summary,
            "messages": {ch.message: {"$ref": f"#/components/messages/{ch.message}"}},
            "bindings": {
                "kafka": {
                    "topic": ch.topic,
                    "partitions": spec.partitions,
                    "replicas": spec.replication,
                    "topicConfiguration": {
                        "cleanup.policy": spec.config["cleanup.policy"].split(","),
                        "retention.ms": int(spec.config["retention.ms"]),
                    },
                    "bindingVersion": "0.5.0",
                }
            },
        }
        operations[ch.operation] = {
            "action": ch.action,
            "channel": {"$ref": f"#/channels/{cid}"},
            "messages": [{"$ref": f"#/channels/{cid}/messages/{ch.message}"}],
        }
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": "reasonwire",
            "version": version,
            "description": "Provider reasoning streams → AG-UI 1.0 events (Kafka + Redis workers). Built from contracts/.",
        },
        "defaultContentType": "application/json",
        "servers": {"kafka": {"host": servers.split(",")[0], "protocol": "kafka", "description": "KAFKA_BOOTSTRAP_SERVERS"}},
        "channels": doc_channels,
        "operations": operations,
        "components": {"messages": messages, "schemas": schemas},
    }
