"""A plain HTTP client for the A2A gateway's tests: exact requests, raw answers."""

from __future__ import annotations

import itertools
import json
from typing import Any

import aiohttp

_ids = itertools.count(1)
HEADERS = {"A2A-Version": "1.0"}


def message(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "messageId": f"m{next(_ids)}",
        "role": "ROLE_USER",
        "parts": [{"text": text}],
        **fields,
    }


async def post(
    url: str, body: Any, *, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """POST ``body`` (bytes as they are, anything else as JSON); status and JSON answer."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=data, headers={**HEADERS, **(headers or {})}) as resp,
    ):
        return resp.status, await resp.json(content_type=None)


async def call(
    url: str, method: str, params: dict[str, Any], *, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """One JSON-RPC call answered HTTP 200; the whole response."""
    request_id = f"r{next(_ids)}"
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    status, answer = await post(url, body, headers=headers)
    assert status == 200, (status, answer)
    assert answer["id"] == request_id, answer
    return answer


async def send(url: str, text: str, **options: Any) -> dict[str, Any]:
    """``SendMessage``; the task it returned (``options`` go to params)."""
    answer = await call(url, "SendMessage", {"message": message(text), **options})
    assert "result" in answer, answer
    return dict(answer["result"]["task"])


async def stream(
    url: str, params: dict[str, Any], method: str = "SendStreamingMessage"
) -> list[dict[str, Any]]:
    """A streaming method (``SendStreamingMessage``, ``SubscribeToTask``): every
    event's ``result`` — or its ``error``, as ``{"error": …}`` — in order,
    until the gateway ends the response."""
    body = {"jsonrpc": "2.0", "id": "s", "method": method, "params": params}
    results = []
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, json=body, headers=HEADERS) as resp,
    ):
        assert resp.status == 200 and resp.content_type == "text/event-stream"
        async for line in resp.content:
            if line.startswith(b"data: "):
                event = json.loads(line[6:])
                assert event["id"] == "s" and event["jsonrpc"] == "2.0"
                results.append(event["result"] if "result" in event else {"error": event["error"]})
    return results


def state(task_or_update: dict[str, Any]) -> str:
    return str(task_or_update["status"]["state"])
