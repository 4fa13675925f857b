"""Runs in the cached venv of PyPI ``mcp`` 2.3.0 (tests/support/mcp_peer.py).

Reads a JSON spec on stdin — ``{url, mode, token?, steps: [...]}`` — connects
with ``mcp.client.Client`` and prints one JSON line per event on stdout:
``{"connected": seconds, "era": "stateless"|"handshake", "protocol": …}``, then
one line per step, then ``{"done": true}``. Steps:

* ``{"op": "list"}`` → ``{"tools": [names]}``
* ``{"op": "call", "name": …, "arguments": …}`` → ``{"text", "structured",
  "is_error"}`` or ``{"error": {"type", "message"}}``
* ``{"op": "await_list_changed", "timeout": s}`` → prints ``{"waiting": true}``
  first, then ``{"list_changed": true|false}`` once the server notified (or not).
* ``{"op": "resources"}`` → ``{"resources": [uris], "templates": [uri templates]}``
* ``{"op": "read", "uri": …}`` → ``{"contents": [{"uri", "mimeType", "text"}]}``
* ``{"op": "follow", "uri": …, "timeout": s}`` → prints ``{"following": [uris]}``
  (``resources/subscribe`` on a session, ``subscriptions/listen`` on the stateless
  revision), then ``{"updated": uri}`` at the first update (``null`` if none).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import httpx2
import mcp_types as types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged

#: URIs of ``notifications/resources/updated`` heard on a session's stream.
UPDATED: asyncio.Queue[str] = asyncio.Queue()


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


async def main(spec: dict[str, Any]) -> None:
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()
        if isinstance(message, types.ResourceUpdatedNotification):
            UPDATED.put_nowait(message.params.uri)

    headers = {}
    if spec.get("token"):
        headers["Authorization"] = f"Bearer {spec['token']}"
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
    transport = streamable_http_client(spec["url"], http_client=http)
    started = time.monotonic()
    async with Client(
        transport, mode=spec.get("mode", "auto"), message_handler=on_message
    ) as client:
        session = client.session
        stateless = getattr(session, "discover_result", None) is not None
        initialized = getattr(session, "initialize_result", None)
        emit(
            {
                "connected": time.monotonic() - started,
                "era": "stateless" if stateless else "handshake",
                "protocol": initialized.protocol_version if initialized is not None else None,
            }
        )
        for step in spec["steps"]:
            emit(await run(client, step, changed))
    await http.aclose()
    emit({"done": True})


async def run(client: Client, step: dict[str, Any], changed: asyncio.Event) -> dict[str, Any]:
    op = step["op"]
    try:
        if op == "list":
            listed = await client.list_tools()
            return {"tools": [tool.name for tool in listed.tools]}
        if op == "call":
            result = await client.call_tool(step["name"], step.get("arguments"))
            texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
            return {
                "text": texts[0] if texts else None,
                "structured": result.structured_content,
                "is_error": bool(result.is_error),
            }
        if op == "resources":
            listed = await client.list_resources()
            templates = await client.list_resource_templates()
            return {
                "resources": [str(r.uri) for r in listed.resources],
                "templates": [t.uri_template for t in templates.resource_templates],
            }
        if op == "read":
            read = await client.read_resource(step["uri"])
            return {"contents": [c.model_dump(mode="json", by_alias=True) for c in read.contents]}
        if op == "follow":
            return await follow(client, step["uri"], step.get("timeout", 10))
        if op == "await_list_changed":
            if getattr(client.session, "discover_result", None) is not None:
                return await listen(client, step.get("timeout", 10))
            changed.clear()
            emit({"waiting": True})
            try:
                await asyncio.wait_for(changed.wait(), step.get("timeout", 10))
            except TimeoutError:
                return {"list_changed": False}
            return {"list_changed": True}
    except Exception as exc:  # the library's way of saying no is the finding
        return {"error": {"type": type(exc).__name__, "message": str(exc)}}
    return {"error": {"type": "UnknownStep", "message": op}}


async def listen(client: Client, timeout: float) -> dict[str, Any]:
    """The stateless revision's way: a ``subscriptions/listen`` stream."""
    async with client.listen(tools_list_changed=True) as subscription:
        emit({"waiting": True})
        try:
            async with asyncio.timeout(timeout):
                async for event in subscription:
                    if isinstance(event, ToolsListChanged):
                        return {"list_changed": True}
        except TimeoutError:
            pass
    return {"list_changed": False}


async def follow(client: Client, uri: str, timeout: float) -> dict[str, Any]:
    """Follow ``uri`` the revision's way; the first update heard."""
    if getattr(client.session, "discover_result", None) is None:
        await client.subscribe_resource(uri)
        emit({"following": [uri]})
        try:
            return {"updated": await asyncio.wait_for(UPDATED.get(), timeout)}
        except TimeoutError:
            return {"updated": None}
    async with client.listen(resource_subscriptions=[uri]) as subscription:
        emit({"following": list(subscription.honored.resource_subscriptions or [])})
        try:
            async with asyncio.timeout(timeout):
                async for event in subscription:
                    if isinstance(event, ResourceUpdated):
                        return {"updated": event.uri}
        except TimeoutError:
            pass
    return {"updated": None}


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.stdin.read())))
