"""``/mcp`` on the HTTP port: MCP's Streamable HTTP transport, every revision at once.

    POST   /mcp   one JSON-RPC message: initialize, server/discover, ping,
                  tools/list, tools/call, subscriptions/listen, notifications
    GET    /mcp   a session's notification stream (405 without a session)
    DELETE /mcp   ends a session (its next request → 404)

A request is served on the revision it speaks (:mod:`protocol.mcp.revisions`):
``initialize`` opens a session (handshake revisions); a request with
``MCP-Protocol-Version: 2026-07-28`` is a self-contained stateless one
(``server/discover`` is always answered that way, at once); a request with
an ``Mcp-Session-Id`` belongs to that session; one with neither is served
without a session. The caller is an agent (``Authorization: Bearer`` with
auth on; else the session's, ``?agent_id=`` or ``mcp-<random>``).

Order of the checks, so that nothing costly is done for a request that is
refused anyway: the Origin (a browser's must be the hub's own, or one of
``allowed_origins``: 403), the caller, the body (bounded), the JSON-RPC
message, the revision's envelope, the session — then, for ``tools/call``
only, a call slot (``max_calls`` per node, a caller at most its
``caller_share`` of them: 429 beyond).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from aiohttp import web

from adapters.kit.shares import ShareExceeded, Shares
from adapters.mcp import http
from adapters.mcp.agent import MCP_AGENT, McpAgent
from adapters.mcp.calllog import CALLS_SPACE, CallLog
from adapters.mcp.calls import ToolRunner
from adapters.mcp.catalog import ToolCatalog
from adapters.mcp.options import McpOptions
from adapters.mcp.sessions import McpSession, Sessions
from adapters.mcp.streams import NotificationStreams
from hub.adapter_host import (
    AdapterHost,
    AgentIdTaken,
    AuthError,
    BackplaneUnavailable,
    BodyRefused,
    Caller,
    SlotsFull,
)
from protocol.mcp import jsonrpc, results, revisions
from protocol.mcp.jsonrpc import ClientReply, JsonRpcError, Notification, Request

try:
    VERSION = version("agora-hub")
except PackageNotFoundError:  # running from a source tree that is not installed
    VERSION = "0"

LIST_CHANGED = "notifications/tools/list_changed"


class McpServer:
    """The MCP adapter: the routes, the ``mcp`` agent, sessions and ``mcp.calls``."""

    system_spaces: tuple[str, ...] = (CALLS_SPACE,)

    def __init__(
        self,
        spaces: Iterable[str] = (),
        *,
        allowed_origins: Iterable[str] = (),
        options: McpOptions | None = None,
    ):
        """``spaces``: the ``mcp = true`` spaces, whose members offer tools."""
        self.spaces = tuple(sorted(set(spaces)))
        self.allowed_origins = frozenset(allowed_origins)
        self.options = o = options or McpOptions()
        #: Tool calls running on this node (``caller_share`` per caller, once started).
        self.calls_running = Shares(o.max_calls, 1.0, "tool calls running")
        self.agent = McpAgent(
            self.spaces, max_answer_bytes=o.max_answer_bytes, max_joined=o.max_joined_spaces,
            on_members_changed=self._members_changed, on_call_event=self._show_call,
        )  # fmt: skip
        self.streams = NotificationStreams(o.max_streams, o.keepalive, self._tools_version)
        self.catalog: ToolCatalog | None = None
        self.sessions: Sessions | None = None
        self.calls: CallLog | None = None
        self.runner: ToolRunner | None = None
        self._host: AdapterHost | None = None
        self._members_moved = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    # ── lifecycle ────────────────────────────────────────────────────────

    async def start(self, host: AdapterHost) -> None:
        o = self.options
        self._host = host
        self.catalog = ToolCatalog(
            self.spaces, host.member_records, ttl=o.tools_ttl, scan_limit=o.member_scan_limit,
            max_tools=o.max_agent_tools, max_bytes=o.max_agent_tools_bytes, exclude=(MCP_AGENT,),
            on_change=self.streams.changed,
        )  # fmt: skip
        self.sessions = Sessions(
            host.kv, o.session_ttl, o.max_sessions, share=host.settings.caller_share
        )
        self.calls_running = Shares(o.max_calls, host.settings.caller_share, "tool calls running")
        self.calls = CallLog(host.settings.node_id, o.max_call_events, MCP_AGENT)
        self.runner = ToolRunner(host, self.agent, self.catalog, self.calls, o)
        await self.agent.start(host)
        self.calls.start(host)
        if self.spaces:
            self._watcher = asyncio.get_running_loop().create_task(self._watch())
        host.mount(
            [web.post("/mcp", self._post), web.get("/mcp", self._get),
             web.delete("/mcp", self._delete)],
            on_shutdown=self._on_shutdown,
        )  # fmt: skip

    async def aclose(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        if self.calls is not None:
            await self.calls.aclose()
        await self.agent.aclose()

    async def _on_shutdown(self) -> None:
        """The HTTP port is closing: waiting calls fail now, streams end."""
        self.agent.fail_waiting("The hub is shutting down: try again.")
        self.streams.close_all()

    def _tools_version(self) -> int:
        return 0 if self.catalog is None else self.catalog.version

    def _show_call(self, msg: dict[str, Any]) -> None:
        if self.calls is not None:
            self.calls.show(msg)

    def _members_changed(self, space: str) -> None:
        assert self.catalog is not None
        self.catalog.invalidate()
        self._members_moved.set()

    async def _watch(self) -> None:
        """While streams are open, re-read the agent tools when members move
        and every ``tools_ttl`` (registrations change without membership)."""
        assert self.catalog is not None
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.options.tools_ttl):
                    await self._members_moved.wait()
            self._members_moved.clear()
            if len(self.streams) and self.catalog.stale:
                with contextlib.suppress(BackplaneUnavailable):
                    await self.catalog.refresh()

    # ── routes ───────────────────────────────────────────────────────────

    @property
    def calling(self) -> int:
        """Tool calls running on this node now."""
        return self.calls_running.taken

    async def _caller(self, request: web.Request) -> Caller | web.Response:
        """Who calls, or the response refusing the request (Origin, auth)."""
        assert self._host is not None
        origin = request.headers.get("Origin")
        own = self._host.public_url(request)
        if origin is not None and not http.origin_allowed(origin, self.allowed_origins, own):
            return http.refused(403, f"Origin {origin[:200]!r} is not allowed")
        try:
            return await self._host.caller(request, prefix="mcp")
        except AuthError:
            return http.unauthorized()
        except AgentIdTaken as exc:
            return http.refused(409, str(exc))

    async def _session(
        self, request: web.Request, caller: Caller, request_id: Any = None
    ) -> tuple[McpSession | None, Caller] | web.Response:
        """The request's session (when it names one) and the caller it binds:
        404 for a session that is unknown, ended, or another caller's."""
        session_id = request.headers.get(revisions.SESSION_HEADER)
        if session_id is None:
            return None, caller
        assert self.sessions is not None and self._host is not None
        try:
            session = await self.sessions.find(session_id)
        except BackplaneUnavailable:
            return http.busy("The hub is unavailable")
        if session is None or (self._host.auth_required and session.caller != caller.agent_id):
            return http.session_not_found(request_id)
        return session, Caller(session.caller, caller.grant, caller.key, caller.anonymous)

    async def _post(self, request: web.Request) -> web.StreamResponse:
        caller = await self._caller(request)
        if isinstance(caller, web.Response):
            return caller
        try:
            body = await http.read_body(request, self.options.max_body_bytes)
        except BodyRefused as exc:
            return http.refused(exc.status, exc.message)
        modern = revisions.is_modern(request.headers.get(revisions.PROTOCOL_VERSION_HEADER))
        try:
            message = jsonrpc.parse_message(body, check=http.check_depth)
        except BodyRefused as exc:
            return http.refused(exc.status, exc.message)
        except JsonRpcError as exc:
            return self._rpc_error(request, exc, modern)
        # server/discover is the stateless revision's probe whatever version it
        # names: its errors (an unknown revision: -32022) take that revision's
        # HTTP statuses too.
        modern = modern or (isinstance(message, Request) and message.method == "server/discover")
        try:
            if isinstance(message, Notification | ClientReply):
                found = await self._session(request, caller)
                return found if isinstance(found, web.Response) else http.accepted()
            return await self._request(request, caller, message, modern)
        except JsonRpcError as exc:
            return self._rpc_error(request, exc, modern)

    def _rpc_error(self, request: web.Request, exc: JsonRpcError, modern: bool) -> web.Response:
        status = revisions.MODERN_ERROR_STATUS.get(exc.code, 200) if modern else 200
        if exc.code in (jsonrpc.PARSE_ERROR, jsonrpc.INVALID_REQUEST):
            status = 400
        return http.answer(request, exc.response(), status=status)

    async def _request(
        self, request: web.Request, caller: Caller, message: Request, modern: bool
    ) -> web.StreamResponse:
        if message.method == "server/discover" or modern:
            revisions.check_envelope(message, request.headers)
            return await self._stateless(request, caller, message)
        if message.method == "initialize":
            return await self._initialize(request, caller, message)
        if not revisions.handshake_header_ok(
            request.headers.get(revisions.PROTOCOL_VERSION_HEADER)
        ):
            return http.refused(400, "Unsupported MCP-Protocol-Version", request_id=message.id)
        found = await self._session(request, caller, message.id)
        if isinstance(found, web.Response):
            return found
        session, caller = found
        headers = {"Mcp-Session-Id": session.id} if session is not None else None
        match message.method:
            case "ping":
                result: dict[str, Any] = {}
            case "tools/list":
                result = await self._tools_list(caller, message.id)
            case "tools/call":
                return await self._tools_call(request, caller, message, headers, modern=False)
            case _:
                raise jsonrpc.method_not_found(message.id, message.method)
        return http.answer(request, jsonrpc.result_response(message.id, result), headers=headers)

    async def _initialize(
        self, request: web.Request, caller: Caller, message: Request
    ) -> web.StreamResponse:
        assert self.sessions is not None
        revision = revisions.negotiate(message.params.get("protocolVersion"))
        try:
            session = await self.sessions.open(caller.agent_id, revision, key=caller.share_key)
        except BackplaneUnavailable:
            return http.busy("The hub is unavailable")
        except ShareExceeded as exc:
            return http.busy(str(exc), message.id, status=429)
        if session is None:
            opened = f"This hub node has {self.options.max_sessions} MCP sessions open"
            return http.busy(opened, message.id)
        result = results.initialize_result(revision, VERSION)
        return http.answer(
            request,
            jsonrpc.result_response(message.id, result),
            headers={"Mcp-Session-Id": session.id},
        )

    async def _stateless(
        self, request: web.Request, caller: Caller, message: Request
    ) -> web.StreamResponse:
        match message.method:
            case "server/discover":
                result = results.discover_result(VERSION)
            case "tools/list":
                result = results.finish(await self._tools_list(caller, message.id), modern=True)
            case "tools/call":
                return await self._tools_call(request, caller, message, None, modern=True)
            case "subscriptions/listen":
                return await self._listen(request, message)
            case _:
                raise jsonrpc.method_not_found(message.id, message.method)
        return http.answer(request, jsonrpc.result_response(message.id, result))

    async def _tools_list(self, caller: Caller, request_id: Any) -> dict[str, Any]:
        assert self.runner is not None
        try:
            return results.tools_list_result(await self.runner.listing(caller))
        except BackplaneUnavailable:
            raise JsonRpcError(
                jsonrpc.INTERNAL_ERROR, "The hub is unavailable: try again", request_id=request_id
            ) from None

    async def _tools_call(
        self,
        request: web.Request,
        caller: Caller,
        message: Request,
        headers: dict[str, str] | None,
        *,
        modern: bool,
    ) -> web.StreamResponse:
        assert self.runner is not None
        name = message.params.get("name")
        arguments = message.params.get("arguments")
        if not isinstance(name, str):
            raise jsonrpc.invalid_params(message.id, "name must be a string")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise jsonrpc.invalid_params(message.id, "arguments must be an object")
        try:
            with self.calls_running.hold(caller.share_key):
                result = await self.runner.call(caller, message.id, name, arguments)
        except SlotsFull:
            running = f"This hub node has {self.options.max_calls} tool calls running"
            return http.busy(running, message.id)
        except ShareExceeded as exc:
            return http.busy(str(exc), message.id, status=429)
        result = results.finish(result, modern=modern)
        return http.answer(request, jsonrpc.result_response(message.id, result), headers=headers)

    async def _listen(self, request: web.Request, message: Request) -> web.StreamResponse:
        wanted = message.params.get("notifications")
        tools = isinstance(wanted, dict) and wanted.get("toolsListChanged") is True
        if self.streams.full:
            return http.busy(f"This hub node has {self.options.max_streams} streams open")
        meta = {revisions.META_SUBSCRIPTION_ID: message.id}
        honoured = {"toolsListChanged": True} if tools else {}
        first = jsonrpc.notification(
            "notifications/subscriptions/acknowledged", {"_meta": meta, "notifications": honoured}
        )
        notice = jsonrpc.sse_event(jsonrpc.notification(LIST_CHANGED, {"_meta": meta}))
        farewell = jsonrpc.result_response(message.id, {"_meta": meta, "resultType": "complete"})
        return await self.streams.serve(
            request,
            headers={},
            first=jsonrpc.sse_event(first),
            notice=lambda: notice if tools else b"",
            farewell=jsonrpc.sse_event(farewell),
        )

    async def _get(self, request: web.Request) -> web.StreamResponse:
        caller = await self._caller(request)
        if isinstance(caller, web.Response):
            return caller
        if revisions.SESSION_HEADER not in request.headers:
            return http.refused(
                405, "GET /mcp needs an Mcp-Session-Id", headers={"Allow": "POST, DELETE"}
            )
        found = await self._session(request, caller)
        if isinstance(found, web.Response):
            return found
        session, _caller = found
        assert session is not None and self.sessions is not None
        if self.streams.full:
            return http.busy(f"This hub node has {self.options.max_streams} streams open")
        sessions = self.sessions

        async def alive() -> bool:
            try:
                return await sessions.find(session.id) is not None
            except BackplaneUnavailable:
                return True

        notice = jsonrpc.sse_event(jsonrpc.notification(LIST_CHANGED))
        return await self.streams.serve(
            request,
            headers={"Mcp-Session-Id": session.id},
            first=None,
            notice=lambda: notice,
            session_id=session.id,
            alive=alive,
        )

    async def _delete(self, request: web.Request) -> web.StreamResponse:
        caller = await self._caller(request)
        if isinstance(caller, web.Response):
            return caller
        if revisions.SESSION_HEADER not in request.headers:
            return http.refused(400, "DELETE /mcp needs an Mcp-Session-Id")
        found = await self._session(request, caller)
        if isinstance(found, web.Response):
            return found
        session, _caller = found
        assert session is not None and self.sessions is not None
        try:
            await self.sessions.end(session.id)
        except BackplaneUnavailable:
            return http.busy("The hub is unavailable")
        self.streams.end_session(session.id)
        return web.Response(status=200)
