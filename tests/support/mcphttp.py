"""A raw MCP client over HTTP for tests that check ``/mcp`` on the wire.

It sends exactly what a test asks (garbage included) and returns the status,
headers and decoded body, so the tests see what a real client would. The
real ``mcp`` library is exercised separately (:mod:`tests.support.mcp_peer`).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "0"},
}
_ids = itertools.count(1)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any

    @property
    def result(self) -> dict[str, Any]:
        assert self.status == 200 and "result" in self.body, (self.status, self.body)
        return self.body["result"]

    @property
    def error(self) -> dict[str, Any]:
        assert "error" in self.body, (self.status, self.body)
        return self.body["error"]


class McpHttp:
    """``/mcp`` of one hub as one caller; ``await initialize()`` opens a session."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        base_url: str,
        *,
        token: str | None = None,
        agent_id: str | None = None,
        modern: bool = False,
    ):
        self.http = http
        self.url = f"{base_url}/mcp" + (f"?agent_id={agent_id}" if agent_id else "")
        self.token = token
        self.modern = modern
        self.session_id: str | None = None
        self.revision: str | None = None

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        if self.revision is not None:
            headers["MCP-Protocol-Version"] = self.revision
        return {**headers, **extra}

    async def post(self, body: Any, **headers: str) -> Reply:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        hdrs = {"Content-Type": "application/json", **self.headers(**headers)}
        async with self.http.post(self.url, data=data, headers=hdrs) as resp:
            raw = await resp.read()
            return Reply(resp.status, dict(resp.headers), decode(raw, resp.content_type))

    async def rpc(self, method: str, params: dict[str, Any] | None = None, **headers: str) -> Reply:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": next(_ids), "method": method}
        params = dict(params or {})
        if self.modern:
            params["_meta"] = META
            headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method, **headers}
            if method == "tools/call":
                headers.setdefault("Mcp-Name", params.get("name", ""))
        if params:
            msg["params"] = params
        return await self.post(msg, **headers)

    async def initialize(self, revision: str = "2025-11-25") -> dict[str, Any]:
        reply = await self.rpc(
            "initialize",
            {"protocolVersion": revision, "capabilities": {}, "clientInfo": {"name": "t"}},
        )
        result = reply.result
        self.session_id = reply.headers.get("Mcp-Session-Id")
        self.revision = result["protocolVersion"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await self.post(note)).status == 202
        return result

    async def tools(self) -> dict[str, dict[str, Any]]:
        return {t["name"]: t for t in (await self.rpc("tools/list")).result["tools"]}

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """A ``tools/call`` result (``isError`` included)."""
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        return (await self.rpc("tools/call", params)).result

    async def delete(self) -> int:
        async with self.http.delete(self.url, headers=self.headers()) as resp:
            return resp.status


def decode(raw: bytes, content_type: str) -> Any:
    if content_type == "text/event-stream":
        events = sse_messages(raw)
        return events[0] if len(events) == 1 else events
    try:
        return orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return raw.decode(errors="replace")


def sse_messages(raw: bytes) -> list[Any]:
    """The JSON of each ``data:`` line of an SSE body."""
    return [
        orjson.loads(line[5:].strip()) for line in raw.splitlines() if line.startswith(b"data:")
    ]


async def next_sse(content: aiohttp.StreamReader, timeout: float = 10.0) -> Any:
    """The next ``data:`` message of an open event stream (comments skipped)."""
    async with asyncio.timeout(timeout):
        while True:
            line = await content.readline()
            if not line:
                raise EOFError("the stream ended")
            if line.startswith(b"data:"):
                return orjson.loads(line[5:].strip())


def text_of(result: dict[str, Any]) -> str:
    return result["content"][0]["text"]
