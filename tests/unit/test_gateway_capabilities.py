"""The gateway advertises what it offers as AG-UI ``AgentCapabilities``, ``transport.resumable``
included: resuming with ``Last-Event-ID`` is its extension to the HTTP binding (docs/gateway.md)."""

from __future__ import annotations

import json

from ag_ui.core import AgentCapabilities
from starlette.testclient import TestClient

from reasonwire.workers.services.gateway.app import Gateway, GatewaySettings, create_app
from reasonwire.workers.services.gateway.keys import KeyBook, hash_key


def client() -> TestClient:
    keys = KeyBook.parse(json.dumps({"keys": [{"sha256": hash_key("s3cret"), "tenant": "acme", "audiences": ["public"]}]}), source="test")
    settings = GatewaySettings()
    app = create_app(settings, keys)
    app.state.gateway = Gateway(settings, keys)  # no lifespan: the route touches neither Kafka nor Redis
    return TestClient(app)


def test_capabilities_declare_a_resumable_streaming_transport() -> None:
    answer = client().get("/v1/capabilities", headers={"Authorization": "Bearer s3cret"})
    assert answer.status_code == 200
    capabilities = AgentCapabilities.model_validate(answer.json())
    assert capabilities.transport is not None
    assert capabilities.transport.resumable is True and capabilities.transport.streaming is True
    assert capabilities.reasoning is not None and capabilities.reasoning.encrypted is True


def test_capabilities_need_a_key_like_every_v1_route() -> None:
    assert client().get("/v1/capabilities").status_code == 401
