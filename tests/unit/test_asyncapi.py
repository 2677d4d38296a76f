"""``reasonwire asyncapi``: the document validates against the official
AsyncAPI 3.0.0 JSON schema (vendored from @asyncapi/specs, tests/schemas/) and its channels
are exactly the topics of contracts/topics.py, each with key, headers and payload from contracts/."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reasonwire.contracts import envelope, topics
from reasonwire.contracts.asyncapi import document
from reasonwire.contracts.usage import UsageRecord

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "asyncapi-3.0.0.json"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return document(version="9.9.9", partitions=6, replication=3)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))


def _topic_constants() -> set[str]:
    return {v for k, v in vars(topics).items() if k.isupper() and isinstance(v, str) and v.startswith("reasoning.")}


def test_document_is_valid_asyncapi_3(doc: dict[str, Any], validator: jsonschema.Draft7Validator) -> None:
    errors = [f"{list(e.path)}: {e.message[:120]}" for e in validator.iter_errors(doc)]
    assert errors == []
    assert doc["asyncapi"] == "3.0.0" and doc["info"]["version"] == "9.9.9"


def test_the_validator_rejects_a_broken_document(doc: dict[str, Any], validator: jsonschema.Draft7Validator) -> None:
    broken = copy.deepcopy(doc)
    broken["operations"]["normalize"]["action"] = "consume"  # not send/receive
    assert not validator.is_valid(broken)


def test_channels_are_the_topics_of_contracts(doc: dict[str, Any]) -> None:
    addresses = [c["address"] for c in doc["channels"].values()]
    assert len(addresses) == len(set(addresses))
    assert set(addresses) == _topic_constants()


def test_every_channel_has_key_payload_and_plan(doc: dict[str, Any]) -> None:
    messages = doc["components"]["messages"]
    for channel in doc["channels"].values():
        [ref] = channel["messages"].values()
        message = messages[ref["$ref"].rsplit("/", 1)[1]]
        assert message["payload"], channel["address"]
        assert message["bindings"]["kafka"]["key"]["description"]
        kafka = channel["bindings"]["kafka"]
        assert (kafka["partitions"], kafka["replicas"]) == (6, 3)
        assert kafka["topicConfiguration"]["retention.ms"] > 0
    usage = next(c for c in doc["channels"].values() if c["address"] == topics.USAGE)
    assert usage["bindings"]["kafka"]["topicConfiguration"]["cleanup.policy"] == ["compact", "delete"]


def test_headers_and_payloads_come_from_contracts(doc: dict[str, Any]) -> None:
    messages = doc["components"]["messages"]
    raw = messages["RawProviderEvent"]
    assert set(raw["headers"]["required"]) == {envelope.HEADER_RUN_ID, envelope.HEADER_PROVIDER, envelope.HEADER_SEQ}
    assert raw["payload"]["format"] == "binary"
    assert envelope.HEADER_REASON in messages["DeadLetter"]["headers"]["required"]
    assert envelope.HEADER_EVENT_SEQ in messages["AgUiEvent"]["headers"]["properties"]
    assert set(messages["UsageRecord"]["payload"]["properties"]) == set(UsageRecord.model_json_schema(mode="serialization")["properties"])
    assert messages["ReplayRequest"]["payload"]["properties"]["request_id"]
    event = doc["components"]["schemas"]["AgUiEvent"]
    assert len(event["oneOf"]) > 20  # every AG-UI event type, not an empty payload


def test_every_ref_resolves(doc: dict[str, Any]) -> None:
    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            return ([node["$ref"]] if "$ref" in node else []) + [r for v in node.values() for r in refs(v)]
        if isinstance(node, list):
            return [r for v in node for r in refs(v)]
        return []

    for ref in refs(doc):
        node: Any = doc
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]
        assert node is not None, ref
