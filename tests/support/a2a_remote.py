"""A remote A2A agent under the test's control, for the outbound bridge's tests.

A small aiohttp server speaking just enough A2A 1.0 (card, ``SendMessage``,
``SendStreamingMessage``, ``GetTask``, ``CancelTask``) whose behaviour is
picked by the message's text, so a test can make it misbehave on purpose:

* ``chunks:N`` — N artifact chunks as fast as it can, then COMPLETED;
  ``slow:N`` — the same, 2 ms apart;
* ``hang`` — the task, WORKING, then nothing until it is cancelled;
* ``rpc-error`` — a JSON-RPC error; ``http500`` — HTTP 500; ``garbage`` — not JSON;
* ``redirect`` — HTTP 307 to ``redirect_to``; ``big`` — a 100 KB artifact;
* ``files:N:K`` — N artifact chunks of one ``{"file": …}`` part of K KiB, then COMPLETED;
* ``keepalive`` — the task, then only SSE comment lines; ``busy`` — the task,
  then WORKING again and again (both every 50 ms, until the hub drops the
  stream: :attr:`RemoteA2a.dropped` has the text, and :attr:`RemoteA2a.called` is set);
* ``ask`` — INPUT_REQUIRED; ``working`` — (``SendMessage``) a task still WORKING,
  COMPLETED when asked again with ``GetTask``;
* ``held:<text>`` — one ``working… `` chunk, then nothing until :attr:`RemoteA2a.gate`
  is set, then as ``<text>`` (``held:ask``: a task that asks for input later);
* anything else — ``echo:<text>``.

Every JSON-RPC call is kept in :attr:`RemoteA2a.calls`; :meth:`stop` and
:meth:`start` again on the same port make a remote that is down for a while.
``hang_cancel=True``: ``CancelTask`` is never answered (until :meth:`stop`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

_tasks = itertools.count(1)


class RemoteA2a:
    def __init__(
        self,
        *,
        streaming: bool = True,
        skills: tuple[str, ...] = ("translate", "summarize"),
        interface: str | None = None,
        redirect_to: str | None = None,
        hang_cancel: bool = False,
    ):
        self.streaming = streaming
        self.skills = skills
        self.interface = interface
        self.redirect_to = redirect_to
        self.hang_cancel = hang_cancel
        #: Set by the test: ``held:`` streams go on.
        self.gate = asyncio.Event()
        self._stopping = asyncio.Event()
        self.calls: list[dict[str, Any]] = []
        #: The texts of the streams the hub dropped before their end.
        self.dropped: list[str] = []
        self.card_reads = 0
        self.called = asyncio.Event()
        self.port = 0
        self._server: TestServer | None = None
        self._cancelled: dict[str, asyncio.Event] = {}
        self._polled: set[str] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> RemoteA2a:
        app = web.Application()
        app.router.add_get("/.well-known/agent-card.json", self._card)
        app.router.add_post("/", self._rpc)
        self._server = TestServer(app, host="127.0.0.1", port=self.port)
        await self._server.start_server()
        self.port = self._server.port or 0
        return self

    async def stop(self) -> None:
        self._stopping.set()
        self.gate.set()
        for hanging in self._cancelled.values():
            hanging.set()  # nothing left waiting for a cancel that will not come
        if self._server is not None:
            await self._server.close()
            self._server = None

    def methods(self) -> list[str]:
        return [c["method"] for c in self.calls]

    async def _card(self, request: web.Request) -> web.Response:
        self.card_reads += 1
        return web.json_response({
            "name": "Remote translator", "description": "Translates things", "version": "1",
            "supportedInterfaces": [{"url": self.interface or f"{self.url}/",
                                     "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {"streaming": self.streaming},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": s, "name": s, "description": s, "tags": []} for s in self.skills],
        })  # fmt: skip

    async def _rpc(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.calls.append({**body, "headers": dict(request.headers)})
        self.called.set()
        method, params, rid = body["method"], body.get("params", {}), body["id"]
        if method == "CancelTask":
            task_id = params["id"]
            if self.hang_cancel:
                await self._stopping.wait()
            if task_id not in self._cancelled:
                return _error(rid, -32002, "Task cannot be canceled")
            self._cancelled[task_id].set()
            return _result(rid, _task(task_id, "ctx", "TASK_STATE_CANCELED"))
        if method == "GetTask":
            return _result(rid, _task(params["id"], "ctx", "TASK_STATE_COMPLETED", "done later"))
        message = params["message"]
        text = "".join(p.get("text", "") for p in message["parts"])
        task_id = message.get("taskId") or f"task-{next(_tasks)}"
        context = message.get("contextId") or f"ctx-{task_id}"
        if text == "http500":
            return web.Response(status=500, text="oops")
        if text == "garbage":
            return web.Response(text="<html>not json</html>", content_type="text/html")
        if text == "rpc-error":
            return _error(rid, -32603, "the remote broke")
        if text == "redirect":
            raise web.HTTPTemporaryRedirect(str(self.redirect_to))
        if method == "SendMessage":
            if text == "working":
                return _result(rid, {"task": _task(task_id, context, "TASK_STATE_WORKING")})
            state = "TASK_STATE_INPUT_REQUIRED" if text == "ask" else "TASK_STATE_COMPLETED"
            answer = None if text == "ask" else f"echo:{text}"
            return _result(rid, {"task": _task(task_id, context, state, answer)})
        return await self._stream(request, rid, text, task_id, context)

    async def _stream(
        self, request: web.Request, rid: Any, text: str, task_id: str, context: str
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def event(result: dict[str, Any]) -> None:
            payload = json.dumps({"jsonrpc": "2.0", "id": rid, "result": result})
            await resp.write(f"data: {payload}\n\n".encode())

        def status(state: str, words: str | None = None) -> dict[str, Any]:
            value: dict[str, Any] = {"state": state}
            if words is not None:
                value["message"] = {"messageId": "s", "role": "ROLE_AGENT",
                                    "parts": [{"text": words}]}  # fmt: skip
            return {"statusUpdate": {"taskId": task_id, "contextId": context, "status": value}}

        def chunk(words: str, n: int) -> dict[str, Any]:
            return {"artifactUpdate": {
                "taskId": task_id, "contextId": context, "append": n > 0,
                "artifact": {"artifactId": "a", "parts": [{"text": words}]},
            }}  # fmt: skip

        await event({"task": _task(task_id, context, "TASK_STATE_SUBMITTED")})
        await event(status("TASK_STATE_WORKING"))
        if text.startswith("held:"):
            await event(chunk("working… ", 0))
            await self.gate.wait()
            text = text.removeprefix("held:")
        if text.startswith(("chunks:", "slow:")):
            for n in range(int(text.split(":")[1])):
                await event(chunk(f"{n},", n))
                if text.startswith("slow:"):
                    await asyncio.sleep(0.002)
            await event(status("TASK_STATE_COMPLETED"))
        elif text == "hang":
            self._cancelled[task_id] = cancelled = asyncio.Event()
            await event(chunk("working… ", 0))
            await cancelled.wait()
            await event(status("TASK_STATE_CANCELED"))
        elif text.startswith("files:"):
            count, kib = (int(n) for n in text.split(":")[1:])
            for n in range(count):
                await event({"artifactUpdate": {
                    "taskId": task_id, "contextId": context, "append": n > 0,
                    "artifact": {"artifactId": "a", "parts": [{"file": "x" * kib * 1024}]},
                }})  # fmt: skip
            await event(status("TASK_STATE_COMPLETED"))
        elif text in ("keepalive", "busy"):
            try:
                while True:
                    await asyncio.sleep(0.05)
                    if text == "keepalive":
                        await resp.write(b": keepalive\n\n")
                    else:
                        await event(status("TASK_STATE_WORKING"))
            except (ConnectionError, asyncio.CancelledError):
                self.dropped.append(text)
                self.called.set()
                raise
        elif text == "big":
            await event(chunk("x" * 100_000, 0))
            await event(status("TASK_STATE_COMPLETED"))
        elif text == "ask":
            await event(status("TASK_STATE_INPUT_REQUIRED", "which city?"))
        else:
            await event(chunk(f"echo:{text}", 0))
            await event(status("TASK_STATE_COMPLETED"))
        await resp.write_eof()
        return resp


def _task(task_id: str, context: str, state: str, text: str | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {"id": task_id, "contextId": context, "status": {"state": state}}
    if text is not None:
        task["artifacts"] = [{"artifactId": "a", "parts": [{"text": text}]}]
    return task


def _result(rid: Any, result: dict[str, Any]) -> web.Response:
    return web.json_response({"jsonrpc": "2.0", "id": rid, "result": result})


def _error(rid: Any, code: int, message: str) -> web.Response:
    error = {"code": code, "message": message}
    return web.json_response({"jsonrpc": "2.0", "id": rid, "error": error})
