"""The system space ``mcp.calls``: every tool call and its outcome, for observers.

Each ``tools/call`` becomes two hub-generated events there (``from: "@hub"``):

    {"event": "call",   "call_id", "tool", "caller", "node", "arguments" | "arguments_bytes"}
    {"event": "result", "call_id", "tool", "caller", "node", "is_error", "error"?, "duration_ms"}

Agents may join ``mcp.calls`` to observe (their join claims apply); nobody
may publish there. The events are published by one background task, in
order, so a call does not wait for its own record; when more than
``max_pending`` are waiting (the backplane is slow or down) new ones are
dropped and counted rather than held without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import deque
from typing import Any

import orjson
import structlog

from hub.adapter_host import AdapterHost, BackplaneUnavailable

CALLS_SPACE = "mcp.calls"
#: Arguments bigger than this (as JSON) are summarised by their size.
MAX_ARGUMENT_BYTES = 4096

log = structlog.get_logger("adapters.mcp")


def new_call_id() -> str:
    return secrets.token_hex(8)


class CallLog:
    def __init__(self, node_id: str, max_pending: int):
        self.node_id = node_id
        self.max_pending = max_pending
        self.dropped = 0
        self._pending: deque[dict[str, Any]] = deque()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._host: AdapterHost | None = None

    def start(self, host: AdapterHost) -> None:
        self._host = host
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def call(self, call_id: str, tool: str, caller: str, arguments: Any) -> None:
        event: dict[str, Any] = {"event": "call", **self._head(call_id, tool, caller)}
        encoded = orjson.dumps(arguments)
        if len(encoded) <= MAX_ARGUMENT_BYTES:
            event["arguments"] = arguments
        else:
            event["arguments_bytes"] = len(encoded)
        self._add(event)

    def result(
        self, call_id: str, tool: str, caller: str, error: str | None, seconds: float
    ) -> None:
        event: dict[str, Any] = {"event": "result", **self._head(call_id, tool, caller)}
        event["is_error"] = error is not None
        if error is not None:
            event["error"] = error[:512]
        event["duration_ms"] = round(seconds * 1000, 1)
        self._add(event)

    def _head(self, call_id: str, tool: str, caller: str) -> dict[str, Any]:
        return {"call_id": call_id, "tool": tool, "caller": caller, "node": self.node_id}

    def _add(self, event: dict[str, Any]) -> None:
        if self._task is None:
            return
        if len(self._pending) >= self.max_pending:
            if not self.dropped:
                log.warning("mcp.calls is behind: dropping its events", limit=self.max_pending)
            self.dropped += 1
            return
        self._pending.append(event)
        self._wakeup.set()

    async def _run(self) -> None:
        assert self._host is not None
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                event = self._pending.popleft()
                try:
                    await self._host.publish_system(CALLS_SPACE, event)
                except BackplaneUnavailable:
                    self.dropped += 1
                except Exception:
                    self.dropped += 1
                    log.exception("mcp.calls event not published")
