"""The runnable example of docs/mcp.md: a hub process, the example agent, curl."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.examples import EXAMPLES, load_example, post, running_agent

example = load_example("mcp_tool_agent")


@pytest.fixture
def example_agent(hub_process) -> Iterator[Any]:
    hub = hub_process(config=str(EXAMPLES / "mcp.toml"))
    with running_agent("mcp_tool_agent", hub.url, "offering MCP tools"):
        yield hub


def rpc(hub: Any, method: str, params: dict[str, Any] | None = None) -> Any:
    """What docs/mcp.md does with curl."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params else {})}
    return post(f"{hub.http_url}/mcp", json.dumps(body), content_type="application/json")


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
