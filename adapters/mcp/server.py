"""``/mcp`` on the HTTP port: MCP's Streamable HTTP transport, every revision at once.

    POST   /mcp   one JSON-RPC message: initialize, server/discover, ping,
                  tools/list, tools/call, resources/*, subscriptions/listen,
                  notifications
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
import secrets
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from aiohttp import web

from adapters.kit.shares import ShareExceeded, Shares
from adapters.mcp import http
from adapters.mcp.agent import MCP_AGENT, McpAgent, ToolFailure
from adapters.mcp.calllog import CALLS_SPACE, HUB_SENDER, CallLog, call_digest
from adapters.mcp.calls import ToolRunner
from adapters.mcp.catalog import ToolCatalog
from adapters.mcp.options import McpOptions
from adapters.mcp.progress import CallKey, Progress, RunningCall, RunningCalls, wants_progress
from adapters.mcp.resources import SpaceResources
from adapters.mcp.sessions import McpSession, Sessions
from adapters.mcp.streams import NotificationStreams
from hub.adapter_host import (
    AdapterHost,
    AgentIdTaken,
    AuthError,
    BackplaneUnavailable,
    BodyRefused,
    Caller,
    HttpFaces,
    SlotsFull,
    until_client_gone,
)
from protocol.mcp import jsonrpc, results, revisions
from protocol.mcp import resources as resource_uris
from protocol.mcp.jsonrpc import ClientReply, JsonRpcError, Notification, Request

try:
    VERSION = version("agora-hub")
except PackageNotFoundError:  # running from a source tree that is not installed
    VERSION = "0"

LIST_CHANGED = "notifications/tools/list_changed"
RESOURCES_CHANGED = "notifications/resources/list_changed"


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
        #: The same calls, by who sent them (for ``notifications/cancelled``).
        self.running = RunningCalls()
        self.agent = McpAgent(
            self.spaces, max_answer_bytes=o.max_answer_bytes, max_joined=o.max_joined_spaces,
            on_members_changed=self._members_changed, on_call_event=self._show_call,
            on_space_message=self._space_message, followed=self._followed,
        )  # fmt: skip
        self.streams = NotificationStreams(o.max_streams, o.keepalive, self._tools_version)
        self.catalog: ToolCatalog | None = None
        self.sessions: Sessions | None = None
        self.calls: CallLog | None = None
        self.runner: ToolRunner | None = None
        self.resources: SpaceResources | None = None
        self._http: HttpFaces | None = None
        self._members_moved = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        self._space_watcher: asyncio.Task[None] | None = None
        #: A session stream opened: the spaces are read at once (the baseline
        #: its list changes are told against).
        self._stream_opened = asyncio.Event()

    # ── lifecycle ────────────────────────────────────────────────────────

    async def start(self, host: AdapterHost) -> None:
        o, s = self.options, host.settings
        self._http = host.http
        self.catalog = ToolCatalog(
            self.spaces, host.spaces.member_records, ttl=o.tools_ttl,
            scan_limit=o.member_scan_limit, max_tools=o.max_agent_tools,
            max_bytes=o.max_agent_tools_bytes, exclude=(MCP_AGENT,), on_change=self.streams.changed,
        )  # fmt: skip
        self.sessions = Sessions(host.kv, o.session_ttl, o.max_sessions, share=s.caller_share)
        self.calls_running = Shares(o.max_calls, s.caller_share, "tool calls running")
        self.calls = CallLog(s.node_id, o.max_call_events, MCP_AGENT)
        self.runner = ToolRunner(
            host.http, host.spaces, self.agent, self.catalog, self.calls, o,
            max_frame_bytes=s.max_frame_bytes, bridge_timeout=s.bridge_timeout,
        )  # fmt: skip
        self.resources = SpaceResources(
            host.http, host.spaces, host.kv, self.agent, self.streams, max_listed=o.max_listed,
            max_subscriptions=o.max_subscriptions, session_ttl=o.session_ttl,
        )  # fmt: skip
        await self.agent.start(host.hosting, retry=min(1.0, s.heartbeat_interval))
        self.calls.start(host.system, host.spaces)
        loop = asyncio.get_running_loop()
        if self.spaces:
            self._watcher = loop.create_task(self._watch())
        self._space_watcher = loop.create_task(self._watch_spaces())
        host.http.mount(
            [web.post("/mcp", self._post), web.get("/mcp", self._get),
             web.delete("/mcp", self._delete)],
            on_shutdown=self._on_shutdown,
        )  # fmt: skip

    async def aclose(self) -> None:
        for watcher in (self._watcher, self._space_watcher):
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
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
        data = msg.get("data")
        if msg.get("from") == HUB_SENDER and isinstance(data, dict):
            digest = data.get("call")
            if data.get("event") == "cancel" and isinstance(digest, str):
                self.running.cancel(digest)
        if self.calls is not None:
            self.calls.show(msg)

    def _space_message(self, msg: dict[str, Any]) -> None:
        if self.resources is not None:
            self.resources.heard(msg)

    def _followed(self, space: str) -> bool:
        return self.resources is not None and self.resources.following(space)

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

    async def _watch_spaces(self) -> None:
        """While a session stream is open on this node, read the hub's spaces
        every ``spaces_interval``; when they change, the streams of the callers
        who may see a space that came or went hear
        ``notifications/resources/list_changed``."""
        assert self.resources is not None
        known: set[str] | None = None
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.options.spaces_interval):
                    await self._stream_opened.wait()
            self._stream_opened.clear()
            if not self.streams.callers:
                known = None
                continue
            try:
                reply = await self.agent.request({"type": "space.list"})
            except ToolFailure:
                continue
            now = {str(s["id"]) for s in reply.get("spaces", []) if isinstance(s, dict)}
            if known is not None and now != known:
                self.resources.spaces_changed(known, now)
            known = now

    # ── routes ───────────────────────────────────────────────────────────

    @property
    def calling(self) -> int:
        """Tool calls running on this node now."""
        return self.calls_running.taken

    async def _caller(self, request: web.Request) -> Caller | web.Response:
        """Who calls, or the response refusing the request (Origin, auth)."""
        assert self._http is not None
        origin = request.headers.get("Origin")
        if origin is not None and not http.origin_allowed(
            origin, self.allowed_origins, self._http.public_url(request)
        ):
            return http.refused(403, f"Origin {origin[:200]!r} is not allowed")
        try:
            return await self._http.caller(request, prefix="mcp")
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
        assert self.sessions is not None and self._http is not None
        try:
            session = await self.sessions.find(session_id)
        except BackplaneUnavailable:
            return http.busy("The hub is unavailable")
        if session is None or (self._http.auth_required and session.caller != caller.agent_id):
            return http.session_not_found(request_id)
        if session.caller == caller.agent_id:
            return session, caller
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
                if isinstance(found, web.Response):
                    return found
                if isinstance(message, Notification):
                    self._notified(message, *found)
                return http.accepted()
            return await self._request(request, caller, message, modern)
        except JsonRpcError as exc:
            return self._rpc_error(request, exc, modern)

    def _notified(self, message: Notification, session: McpSession | None, caller: Caller) -> None:
        """A client's notification: ``notifications/cancelled`` stops the call it names
        (the same caller's, in the same session), here or on the node running it."""
        if message.method != "notifications/cancelled":
            return
        request_id = message.params.get("requestId")
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return
        if isinstance(request_id, str) and len(request_id) > jsonrpc.MAX_ID:
            return
        digest = call_digest(caller.agent_id, session.id if session else "", request_id)
        if not self.running.cancel(digest) and self.calls is not None:
            self.calls.cancel(digest)  # running on another node, maybe

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
                session_id = session.id if session is not None else ""
                return await self._tools_call(
                    request, caller, message, headers, modern=False, session_id=session_id
                )
            case "resources/subscribe":
                result = await self._resources().subscribe(
                    session, caller, message.id, message.params
                )
            case "resources/unsubscribe":
                result = await self._resources().unsubscribe(
                    session, caller, message.id, message.params
                )
            case _:
                result = await self._read_resources(caller, message)
        return http.answer(request, jsonrpc.result_response(message.id, result), headers=headers)

    def _resources(self) -> SpaceResources:
        assert self.resources is not None
        return self.resources

    async def _read_resources(self, caller: Caller, message: Request) -> dict[str, Any]:
        """``resources/list``, ``resources/templates/list``, ``resources/read``
        (every revision); any other method is not found."""
        match message.method:
            case "resources/list":
                return await self._resources().listing(caller, message.id)
            case "resources/templates/list":
                return resource_uris.templates_list_result()
            case "resources/read":
                return await self._resources().read(caller, message.id, message.params)
        raise jsonrpc.method_not_found(message.id, message.method)

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
                return await self._listen(request, caller, message)
            case "resources/subscribe" | "resources/unsubscribe":
                # Sessions are the handshake revision's: subscribing needs one
                # (-32602, after the space's own check), unsubscribing stops nothing.
                resources = self._resources()
                follow = (
                    resources.subscribe
                    if message.method == "resources/subscribe"
                    else resources.unsubscribe
                )
                result = results.finish(
                    await follow(None, caller, message.id, message.params), modern=True
                )
            case _:
                result = results.finish(await self._read_resources(caller, message), modern=True)
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
        session_id: str = "",
    ) -> web.StreamResponse:
        name = message.params.get("name")
        arguments = message.params.get("arguments")
        if not isinstance(name, str):
            raise jsonrpc.invalid_params(message.id, "name must be a string")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise jsonrpc.invalid_params(message.id, "arguments must be an object")
        token = wants_progress(request, message.params)
        progress = Progress(request, token, headers) if token is not None else None
        slots, share_key = self.calls_running, caller.share_key
        try:
            slots.take(share_key)
        except SlotsFull:
            running = f"This hub node has {self.options.max_calls} tool calls running"
            return http.busy(running, message.id)
        except ShareExceeded as exc:
            return http.busy(str(exc), message.id, status=429)
        try:
            key = (caller.agent_id, session_id, message.id)
            result = await self._run_call(request, key, caller, name, arguments, progress)
        finally:
            slots.give_back(share_key)
        answer = jsonrpc.result_response(message.id, results.finish(result, modern=modern))
        if progress is not None:
            return await progress.answer(answer)
        return http.answer(request, answer, headers=headers)

    async def _run_call(
        self,
        request: web.Request,
        key: CallKey,
        caller: Caller,
        name: str,
        arguments: dict[str, Any],
        progress: Progress | None,
    ) -> dict[str, Any]:
        """Run the call in this request's task, which the client's
        ``notifications/cancelled`` or its going away cancels (the agent
        answering is then told to stop); a cancelled call's result says so."""
        assert self.runner is not None
        task = asyncio.current_task()
        assert task is not None
        running = RunningCall(task)
        digest = self.running.add(key, running)
        gone = until_client_gone(request)
        gone.add_done_callback(running.client_gone)
        report = progress.delta if progress is not None else None
        try:
            return await self.runner.call(caller, key[2], name, arguments, report)
        except asyncio.CancelledError:
            if not running.stopped():
                raise  # this request itself is being cancelled (shutdown)
            return results.error_result("Cancelled: the client stopped the call.")
        finally:
            gone.remove_done_callback(running.client_gone)
            self.running.remove(digest, running)
            running.done()

    async def _listen(
        self, request: web.Request, caller: Caller, message: Request
    ) -> web.StreamResponse:
        """``subscriptions/listen`` (the stateless revision): a stream of tool list
        changes, resource list changes and updates of the spaces it names, as asked
        (the acknowledgement echoes what is honoured)."""
        wanted = message.params.get("notifications")
        wanted = wanted if isinstance(wanted, dict) else {}
        tools = wanted.get("toolsListChanged") is True
        spaces_changed = wanted.get("resourcesListChanged") is True
        if self.streams.full:
            return http.busy(f"This hub node has {self.options.max_streams} streams open")
        meta = {revisions.META_SUBSCRIPTION_ID: message.id}
        key = f"listen:{secrets.token_hex(12)}"
        resources = self._resources()
        try:
            uris = wanted.get("resourceSubscriptions")
            followed = await resources.listen(key, meta, caller, uris)
            honoured: dict[str, Any] = {}
            if tools:
                honoured["toolsListChanged"] = True
            if spaces_changed:
                honoured["resourcesListChanged"] = True
            if followed:
                honoured["resourceSubscriptions"] = followed
            first = jsonrpc.notification(
                "notifications/subscriptions/acknowledged",
                {"_meta": meta, "notifications": honoured},
            )
            notice = jsonrpc.sse_event(jsonrpc.notification(LIST_CHANGED, {"_meta": meta}))
            changed = jsonrpc.notification(RESOURCES_CHANGED, {"_meta": meta})
            farewell = jsonrpc.result_response(
                message.id, {"_meta": meta, "resultType": "complete"}
            )
            return await self.streams.serve(
                request,
                headers={},
                first=jsonrpc.sse_event(first),
                notice=lambda: notice if tools else b"",
                farewell=jsonrpc.sse_event(farewell),
                session_id=key,
                caller=caller,
                resources_changed=jsonrpc.sse_event(changed) if spaces_changed else None,
                on_open=self._spaces_baseline,
            )
        finally:
            resources.stream_closed(key)

    async def _spaces_baseline(self) -> None:
        self._stream_opened.set()

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
        session, caller = found
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
        resources = self._resources()
        return await self.streams.serve(
            request,
            headers={"Mcp-Session-Id": session.id},
            first=None,
            notice=lambda: notice,
            session_id=session.id,
            caller=caller,
            resources_changed=jsonrpc.sse_event(jsonrpc.notification(RESOURCES_CHANGED)),
            alive=alive,
            on_open=lambda: self._opened(session.id),
            on_close=lambda: resources.stream_closed(session.id),
            on_tick=lambda: resources.refresh(session.id),
        )

    async def _opened(self, session_id: str) -> None:
        self._stream_opened.set()
        await self._resources().stream_opened(session_id)

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
            await self._resources().session_ended(session.id)
        except BackplaneUnavailable:
            return http.busy("The hub is unavailable")
        self.streams.end_session(session.id)
        return web.Response(status=200)
