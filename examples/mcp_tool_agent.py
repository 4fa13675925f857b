"""An agent on the hub that offers MCP tools to any MCP host connected to /mcp.

Run a hub with ``examples/mcp.toml``, then this agent. An MCP host pointed at
``http://127.0.0.1:8766/mcp`` then lists, besides the hub's own tools,
``forecaster.forecast`` and ``forecaster.add``; with curl::

    curl -s http://127.0.0.1:8766/mcp -H 'Content-Type: application/json' \\
         -d '{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
              "params": {"name": "forecaster.forecast", "arguments": {"city": "Oslo"}}}'

The agent lists its tools in ``metadata.mcp_tools`` when it registers, and is a
member of the ``mcp = true`` space ``tools``. Each call arrives as a
``space.event`` from ``mcp`` addressed to this agent, with ``data = {via: "mcp",
tool, arguments, caller}``; the first event in the space whose
``data.in_reply_to`` names it is the answer: ``result`` (JSON), ``text``, or
``status: "failure"`` with ``error``.
"""

from __future__ import annotations

import argparse
import hashlib
from typing import Any

from agora_client import Client, Event, run

FORECASTS = ("sunny", "windy", "cloudy", "rainy")

TOOLS = [
    {
        "name": "forecast",
        "description": "Tomorrow's weather in a city.",
        "inputSchema": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
    {
        "name": "add",
        "description": "The sum of two numbers.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
]


def forecast(city: str) -> str:
    # Deterministic, so the example's test knows the answer.
    return FORECASTS[hashlib.sha1(city.lower().encode()).digest()[0] % len(FORECASTS)]


def answer(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The reply's data for one call of ``tool``."""
    if tool == "forecast":
        city = arguments.get("city")
        if not isinstance(city, str) or not city:
            return {"status": "failure", "error": "city must be a non-empty string"}
        return {"result": {"city": city, "forecast": forecast(city)}}
    if tool == "add":
        a, b = arguments.get("a"), arguments.get("b")
        if not all(isinstance(n, int | float) and not isinstance(n, bool) for n in (a, b)):
            return {"status": "failure", "error": "a and b must be numbers"}
        return {"result": {"sum": a + b}}  # type: ignore[operator]
    return {"status": "failure", "error": f"no tool {tool!r}"}


def handle(event: Event) -> dict[str, Any] | None:
    """What ``serve`` calls for each request in the space: the tool calls."""
    if event.sender != "mcp" or "tool" not in event.data:
        return None  # not a tool call (space_ask questions carry text instead)
    arguments = event.data.get("arguments")
    return answer(str(event.data["tool"]), arguments if isinstance(arguments, dict) else {})


async def main(url: str, space: str, agent_id: str, token: str | None) -> None:
    metadata = {"mcp_tools": TOOLS}
    async with Client(url, agent_id, token=token, reconnect=True, metadata=metadata) as hub:
        await hub.join(space)
        print(f"{agent_id} offering MCP tools in {space!r}", flush=True)
        await hub.serve(space, handle)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8765/ws")
    parser.add_argument("--space", default="tools")
    parser.add_argument("--agent-id", default="forecaster")
    parser.add_argument("--token", default=None)
    args = parser.parse_args()
    run(main(args.url, args.space, args.agent_id, args.token))
