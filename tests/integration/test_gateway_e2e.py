"""Show: the whole loop on the real broker and Redis, driven by the real AG-UI client and a browser.

agent service (examples/agent_service.py) ⇄ reasonwire (normalizer worker + gateway) ⇄
``@ag-ui/client`` ``HttpAgent`` in Node, and ``/v1/viewer`` in headless Chromium.
Node/npm and Chromium are needed; where node is absent the tests skip, saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.oracle import translate_file
from tests.integration.conftest import ROOT
from tests.integration.gateway_support import GatewayProcess, gateway  # noqa: F401 - fixture

pytestmark = pytest.mark.integration

NODE_DIR = ROOT / "tests" / "e2e_node"
FIXTURES = ROOT / "tests" / "fixtures" / "anthropic-messages"
TURN1 = FIXTURES / "c_interleaved_thinking_tool_calls.jsonl"
TURN2 = FIXTURES / "e2_opaque_only.jsonl"
MODEL = "claude-opus-4-5-20251101"


@pytest.fixture(scope="module")
def node() -> str:
    """node + the pinned @ag-ui/client (npm ci from package-lock.json when node_modules is absent)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node/npm not installed: the HttpAgent end-to-end test needs Node.js 18+ (apt-get install nodejs npm)")
    if not (NODE_DIR / "node_modules" / "@ag-ui" / "client").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True, capture_output=True, timeout=600)
    return node


class AgentProcess:
    def __init__(self, settings: Any, tmp: Path, scripts: list[Path]) -> None:
        self.requests_log = tmp / "agent-requests.jsonl"
        self.log = tmp / "agent.log"
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers, "REDIS_URL": settings.redis_url}
        cmd = [sys.executable, str(ROOT / "examples" / "agent_service.py"), "--provider", "anthropic-messages", "--model", MODEL]
        cmd += [a for s in scripts for a in ("--script", str(s))] + ["--requests-log", str(self.requests_log)]
        self._out = self.log.open("wb")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._out, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 60
        while b"agent service ready" not in self.log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"agent service did not start: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)

    def requests(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.requests_log.read_text().splitlines()] if self.requests_log.exists() else []

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._out.close()


@pytest.fixture
def agent_service(primed_group: Any, tmp_path: Path) -> Iterator[AgentProcess]:
    agent = AgentProcess(primed_group, tmp_path, [TURN1, TURN2])
    yield agent
    agent.stop()


def _signatures(value: Any) -> list[str]:
    """Every Anthropic ``signature`` / redacted ``data`` in a provider request body, in order."""
    if isinstance(value, dict):
        own = [value["signature"]] if value.get("type") == "thinking" else [value["data"]] if value.get("type") == "redacted_thinking" else []
        return own + [s for v in value.values() for s in _signatures(v)]
    if isinstance(value, list):
        return [s for v in value for s in _signatures(v)]
    return []


def test_http_agent_two_turns_carry_opaque_state_back_to_the_agent_byte_for_byte(
    node: str, spawn_worker: Any, gateway: GatewayProcess, agent_service: AgentProcess
) -> None:
    """Turn 1: reasoning, a tool call and the answer reach HttpAgent's messages with their
    encryptedValues (internal audience). Turn 2: the client posts them back and the agent's
    replayed provider input holds the provider's signatures unchanged (R3, R8, P5)."""
    worker = spawn_worker()
    worker.wait_assigned()
    thread_id = f"thread-e2e-{uuid.uuid4().hex[:8]}"
    runs = [f"run-e2e-1-{uuid.uuid4().hex[:8]}", f"run-e2e-2-{uuid.uuid4().hex[:8]}"]
    cfg = {"url": f"{gateway.url}/v1/agent?audience=internal", "key": "acme-internal", "threadId": thread_id, "runs": runs}
    done = subprocess.run([node, "http_agent_turns.mjs", json.dumps(cfg)], cwd=NODE_DIR, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"HttpAgent failed: {done.stderr[-3000:]}\nagent: {agent_service.log.read_text()[-2000:]}"
    assert "Error" not in done.stderr, done.stderr[-3000:]  # the verifier logs nothing either
    turn1 = json.loads(done.stdout)["turn1"]

    offline = translate_file("anthropic-messages", TURN1, run_id=runs[0], thread_id=thread_id, model=MODEL)
    issued = [a.value for a in offline.artefacts]
    assert issued, "the turn-1 capture carries signatures"
    reasoning = [m for m in turn1 if m["role"] == "reasoning"]
    calls = [c for m in turn1 if m["role"] == "assistant" for c in m.get("toolCalls") or []]
    answer = "".join(m["content"] for m in turn1 if m["role"] == "assistant" and isinstance(m.get("content"), str))
    assert reasoning and all(m["content"] for m in reasoning)
    assert calls and all(c["function"]["name"] and json.loads(c["function"]["arguments"]) is not None for c in calls)
    assert answer
    client_values = [m["encryptedValue"] for m in reasoning if "encryptedValue" in m] + [c["encryptedValue"] for c in calls if "encryptedValue" in c]
    assert sorted(client_values) == sorted(issued)  # every opaque value reached the client unchanged

    # this thread's requests: the example agent's consumer group is shared by every test on the
    # broker, and a request another test published just before it started is answered too
    requests = [r for r in agent_service.requests() if r["thread_id"] == thread_id]
    assert [r["run_id"] for r in requests] == runs
    assert _signatures(requests[0]["body"]) == []  # turn 1: nothing to replay yet
    replayed = _signatures(requests[1]["body"])
    assert sorted(replayed) == sorted(issued)  # byte for byte, every one of them, to its issuer


def test_viewer_in_headless_chromium_renders_reasoning_collapsed_tool_calls_and_answer(
    node: str, spawn_worker: Any, gateway: GatewayProcess, primed_group: Any, tmp_path: Path
) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium not installed: the viewer test needs Debian's chromium (apt-get install -y chromium)")
    import asyncio

    from tests.integration.test_gateway import _publish

    worker = spawn_worker()
    worker.wait_assigned()
    run_id, thread_id = f"run-viewer-{uuid.uuid4().hex[:8]}", f"thread-viewer-{uuid.uuid4().hex[:8]}"
    url = f"{gateway.url}/v1/viewer?thread={thread_id}&run={run_id}&audience=internal#key=acme-internal"
    shot = tmp_path / "viewer.png"
    browser = subprocess.Popen(
        [node, "viewer_screenshot.mjs", json.dumps({"url": url, "chromium": chromium, "screenshot": str(shot)})],
        cwd=NODE_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    time.sleep(2)  # the page is open and waiting before the run starts: it renders as the run streams
    asyncio.run(_publish(primed_group.kafka_bootstrap_servers, run_id, thread_id, TURN1.read_text().splitlines(), pause_after=6, pause=1.0))
    out, err = browser.communicate(timeout=120)
    assert browser.returncode == 0, err[-3000:]
    page = json.loads(out)
    assert page["status"] == "run finished"
    assert page["reasoningOpen"] == [False] * len(page["reasoning"])  # collapsed
    assert "I need the weather in both cities. Start with Paris." in page["reasoning"]
    assert any(t.startswith("tool call get_weather(") for t in page["tools"]), page["tools"]
    assert page["answer"].strip()
    assert shot.stat().st_size > 1000
