"""The runnable example of docs/mcp.md: a hub process, the example agent, curl."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest

from tests.support.servers import ROOT

EXAMPLES = ROOT / "examples"
_spec = importlib.util.spec_from_file_location("mcp_tool_agent", EXAMPLES / "mcp_tool_agent.py")
assert _spec is not None and _spec.loader is not None
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)


@pytest.fixture
def example_agent(hub_process) -> Any:
    hub = hub_process(config=str(EXAMPLES / "mcp.toml"))
    agent = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "mcp_tool_agent.py"), "--url", hub.url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert agent.stdout is not None
        line = agent.stdout.readline()  # blocks until the agent has joined (or died)
        assert "offering MCP tools" in line, line + agent.stdout.read()
        yield hub
    finally:
        agent.terminate()
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()


def rpc(hub: Any, method: str, params: dict[str, Any] | None = None) -> Any:
    """What docs/mcp.md does with curl (or urllib where there is no curl)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params else {})}
    url, data = f"{hub.http_url}/mcp", json.dumps(body)
    curl = shutil.which("curl")
    if curl is not None:
        args = [curl, "-s", "--max-time", "20", url, "-H", "Content-Type: application/json"]
        out = subprocess.run([*args, "-d", data], capture_output=True, text=True, timeout=30)
        return json.loads(out.stdout)
    request = urllib.request.Request(
        url, data=data.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=20) as resp:
        return json.loads(resp.read())


def test_the_example_agents_tools_answer_over_mcp(example_agent):
    deadline = time.monotonic() + 10
    while True:  # the tools appear within tools_ttl of the agent's registration
        names = [t["name"] for t in rpc(example_agent, "tools/list")["result"]["tools"]]
        if "forecaster.forecast" in names or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert {"forecaster.forecast", "forecaster.add"} <= set(names)
    called = rpc(example_agent, "tools/call",
                 {"name": "forecaster.forecast", "arguments": {"city": "Oslo"}})  # fmt: skip
    expected = {"city": "Oslo", "forecast": example.forecast("Oslo")}
    assert called["result"]["structuredContent"] == expected
    assert json.loads(called["result"]["content"][0]["text"]) == expected
    added = rpc(example_agent, "tools/call",
                {"name": "forecaster.add", "arguments": {"a": 2, "b": 40}})  # fmt: skip
    assert added["result"]["structuredContent"] == {"sum": 42}
    wrong = rpc(example_agent, "tools/call",
                {"name": "forecaster.add", "arguments": {"a": "2", "b": 40}})  # fmt: skip
    assert wrong["result"]["isError"] is True


def test_the_example_answers_without_a_hub():
    assert example.answer("forecast", {"city": "Oslo"})["result"]["city"] == "Oslo"
    assert example.answer("forecast", {})["status"] == "failure"
    assert example.answer("nope", {})["status"] == "failure"
