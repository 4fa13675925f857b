"""Spaces as MCP resources: list, read, and follow them live.

* ``resources/list`` — the spaces the caller may join (``agora://spaces/{space}``);
  ``resources/templates/list`` — that one template.
* ``resources/read`` — the latest events of the space, as ``space_history``
  gives them to the caller (JSON text).
* ``resources/subscribe`` / ``unsubscribe`` — a session follows a space: each new
  event there becomes ``notifications/resources/updated`` on the session's
  notification stream (``GET /mcp``). A session's subscriptions are kept in
  the cluster's key-value store (at most ``max_subscriptions``), so the node
  holding its stream follows them whichever node took the request; that node's
  ``mcp`` agent joins the space to hear its events (and stays while anyone
  follows it there).

Every method asks the hub's one policy (may the caller *read* the space?); a
space it may not read is answered exactly like one that does not exist
(``-32002``, resource not found).

Which events notify: those the ``mcp`` agent hears that are not addressed
(broadcasts, and a stream when it is done) — never one addressed to someone,
which the caller's own history would not show. Notifications for one URI
coalesce while a stream's client has not read them.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Any

import orjson

from adapters.kit.joined import JoinRefused, NodeNotReady
from adapters.kit.stored import json_object
from adapters.mcp.agent import McpAgent, ToolFailure
from adapters.mcp.sessions import McpSession
from adapters.mcp.streams import NotificationStreams
from hub.adapter_host import (
    BackplaneUnavailable,
    Caller,
    HttpFaces,
    KeyValueStore,
    RequestFailed,
    SpaceReads,
)
from protocol.mcp import jsonrpc, resources
from protocol.mcp.jsonrpc import JsonRpcError
from protocol.mcp.results import json_text
from protocol.mcp.tools import DEFAULT_HISTORY

PREFIX = "mcp:subs:"
UPDATED = "notifications/resources/updated"
LIST_CHANGED = "notifications/resources/list_changed"


def not_found(request_id: Any, uri: object) -> JsonRpcError:
    shown = uri[:200] if isinstance(uri, str) else None
    return JsonRpcError(
        resources.RESOURCE_NOT_FOUND,
        "Resource not found (no such space, or you may not read it)",
        data={"uri": shown},
        request_id=request_id,
    )


class SpaceResources:
    def __init__(
        self,
        http: HttpFaces,
        spaces: SpaceReads,
        kv: KeyValueStore,
        agent: McpAgent,
        streams: NotificationStreams,
        *,
        max_listed: int,
        max_subscriptions: int,
        session_ttl: float,
    ):
        """``http``: the hub's one policy; ``spaces``: whether a space exists
        and its history; ``kv``: where a session's subscriptions are kept."""
        self._http = http
        self._spaces = spaces
        self._kv = kv
        self.agent = agent
        self.streams = streams
        self.max_listed = max_listed
        self.max_subscriptions = max_subscriptions
        self.session_ttl = session_ttl
        #: space -> sessions with a stream on this node following it.
        self._following: defaultdict[str, set[str]] = defaultdict(set)
        #: session -> the spaces it follows (for the sessions with a stream here).
        self._of_session: dict[str, set[str]] = {}
        #: ``subscriptions/listen`` streams (stateless revision) -> their ``_meta``.
        self._listening: dict[str, dict[str, Any]] = {}

    def following(self, space: str) -> bool:
        """Does a session with a stream on this node follow ``space``?"""
        return space in self._following

    # ── the methods ──────────────────────────────────────────────────────

    async def visible(self, caller: Caller) -> list[dict[str, Any]]:
        """``space.list`` entries of the spaces ``caller`` may join."""
        try:
            reply = await self.agent.request({"type": "space.list"})
        except ToolFailure as exc:
            raise JsonRpcError(jsonrpc.INTERNAL_ERROR, str(exc)) from None
        spaces = [s for s in reply.get("spaces", []) if isinstance(s, dict) and "id" in s]
        mine = [s for s in spaces if self._http.policy.may_read(caller, str(s["id"]))]
        return mine[: self.max_listed]

    async def listing(self, caller: Caller, request_id: Any) -> dict[str, Any]:
        try:
            return resources.resources_list_result(await self.visible(caller))
        except JsonRpcError as exc:
            raise exc.for_request(request_id) from None

    async def space(self, caller: Caller, request_id: Any, params: dict[str, Any]) -> str:
        """The space ``params.uri`` names, when the caller may read it and it exists."""
        uri = params.get("uri")
        space = resources.space_of(uri)
        if space is None or not self._http.policy.may_read(caller, space):
            raise not_found(request_id, uri)
        try:
            exists = await self._spaces.space_exists(space)
        except BackplaneUnavailable:
            raise _unavailable(request_id) from None
        if not exists:
            raise not_found(request_id, uri)
        return space

    async def read(self, caller: Caller, request_id: Any, params: dict[str, Any]) -> dict[str, Any]:
        space = await self.space(caller, request_id, params)
        try:
            events = await self._spaces.history(space, DEFAULT_HISTORY, caller.agent_id)
        except BackplaneUnavailable:
            raise _unavailable(request_id) from None
        events = [{k: v for k, v in e.items() if k != "request_id"} for e in events]
        text = json_text({"space": space, "events": events})
        return resources.read_result(resources.space_uri(space), text)

    async def subscribe(
        self, session: McpSession | None, caller: Caller, request_id: Any, params: dict[str, Any]
    ) -> dict[str, Any]:
        space = await self.space(caller, request_id, params)
        if session is None:
            raise jsonrpc.invalid_params(
                request_id, "resources/subscribe needs a session (initialize first)"
            )
        try:
            spaces = await self._stored(session.id)
            if space not in spaces:
                if len(spaces) >= self.max_subscriptions:
                    raise jsonrpc.invalid_params(
                        request_id, f"a session follows at most {self.max_subscriptions} spaces"
                    )
                await self._store(session.id, [*spaces, space])
        except BackplaneUnavailable:
            raise _unavailable(request_id) from None
        if session.id in self._of_session:  # its stream is on this node: follow now
            await self._follow(session.id, space)
        return {}

    async def unsubscribe(
        self, session: McpSession | None, caller: Caller, request_id: Any, params: dict[str, Any]
    ) -> dict[str, Any]:
        space = resources.space_of(params.get("uri"))
        if session is None or space is None:
            return {}  # nothing followed: nothing to stop
        try:
            spaces = await self._stored(session.id)
            if space in spaces:
                await self._store(session.id, [s for s in spaces if s != space])
        except BackplaneUnavailable:
            raise _unavailable(request_id) from None
        self._unfollow(session.id, space)
        return {}

    # ── a session's stream on this node ──────────────────────────────────

    async def stream_opened(self, session_id: str) -> None:
        """A session's notification stream opened here: follow what it subscribed to."""
        self._of_session.setdefault(session_id, set())
        await self.refresh(session_id)

    async def refresh(self, session_id: str) -> None:
        """Follow exactly the spaces the session's stored subscriptions name
        (they may have changed through another node)."""
        if session_id not in self._of_session:
            return
        try:
            stored = await self._stored(session_id)
        except BackplaneUnavailable:
            return
        wanted = set(stored)
        for space in self._of_session.get(session_id, set()) - wanted:
            self._unfollow(session_id, space)
        for space in wanted - self._of_session.get(session_id, set()):
            await self._follow(session_id, space)
        if wanted:  # stored as long as the stream lives (a session's expiry slides)
            with contextlib.suppress(BackplaneUnavailable):
                await self._store(session_id, stored)

    async def listen(
        self, key: str, meta: dict[str, Any], caller: Caller, uris: object
    ) -> list[str]:
        """A ``subscriptions/listen`` stream (``key``) asks to follow ``uris``: the
        ones honoured (spaces that exist and the caller may read, at most
        ``max_subscriptions``); :meth:`stream_closed` ends them."""
        if not isinstance(uris, list):
            return []
        honoured: list[str] = []
        self._listening[key] = meta
        self._of_session.setdefault(key, set())
        for uri in uris[: self.max_subscriptions]:
            space = resources.space_of(uri)
            if space is None or not self._http.policy.may_read(caller, space):
                continue
            try:
                if not await self._spaces.space_exists(space):
                    continue
            except BackplaneUnavailable:
                continue
            await self._follow(key, space)
            if space in self._of_session[key]:
                honoured.append(resources.space_uri(space))
        return honoured

    def stream_closed(self, session_id: str) -> None:
        """Its stream closed (a session's subscriptions stay stored for the next one)."""
        self._listening.pop(session_id, None)
        for space in self._of_session.pop(session_id, set()):
            self._drop(session_id, space)

    async def session_ended(self, session_id: str) -> None:
        self.stream_closed(session_id)
        await self._kv.delete(PREFIX + session_id)

    # ── events ───────────────────────────────────────────────────────────

    def heard(self, msg: dict[str, Any]) -> None:
        """A message the ``mcp`` agent received: tell the sessions following its space."""
        space = msg.get("space")
        sessions = self._following.get(space) if isinstance(space, str) else None
        if not sessions or "to" in msg:
            return
        if msg.get("type") not in ("space.event", "space.event.done"):
            return
        assert isinstance(space, str)
        uri = resources.space_uri(space)
        frame = jsonrpc.sse_event(jsonrpc.notification(UPDATED, resources.updated(uri)))
        for session_id in sessions:
            meta = self._listening.get(session_id)
            if meta is None:
                self.streams.push(session_id, uri, frame)
            else:
                note = jsonrpc.notification(UPDATED, {**resources.updated(uri), "_meta": meta})
                self.streams.push(session_id, uri, jsonrpc.sse_event(note))

    def spaces_changed(self, before: set[str], after: set[str]) -> None:
        """The hub's spaces went from ``before`` to ``after``: tell each session
        stream whose caller may see a space that came or went (nobody hears of
        a space it may not see)."""
        moved = before ^ after
        may_read = self._http.policy.may_read
        self.streams.resources_changed(
            lambda caller: any(may_read(caller, space) for space in moved), LIST_CHANGED
        )

    # ── helpers ──────────────────────────────────────────────────────────

    async def _follow(self, session_id: str, space: str) -> None:
        try:
            await self.agent.joining.join(space)
        except (JoinRefused, RequestFailed, NodeNotReady, TimeoutError):
            return  # not followed on this node now; the next refresh tries again
        self._following[space].add(session_id)
        self._of_session.setdefault(session_id, set()).add(space)

    def _unfollow(self, session_id: str, space: str) -> None:
        spaces = self._of_session.get(session_id)
        if spaces is not None:
            spaces.discard(space)
        self._drop(session_id, space)

    def _drop(self, session_id: str, space: str) -> None:
        sessions = self._following.get(space)
        if sessions is not None:
            sessions.discard(session_id)
            if not sessions:
                del self._following[space]

    async def _stored(self, session_id: str) -> list[str]:
        value = json_object(await self._kv.get(PREFIX + session_id))
        spaces = value.get("spaces") if value is not None else None
        if not isinstance(spaces, list):
            return []
        return [s for s in spaces if isinstance(s, str)][: self.max_subscriptions]

    async def _store(self, session_id: str, spaces: list[str]) -> None:
        value = orjson.dumps({"spaces": spaces})
        await self._kv.set(PREFIX + session_id, value, self.session_ttl)


def _unavailable(request_id: Any) -> JsonRpcError:
    return JsonRpcError(
        jsonrpc.INTERNAL_ERROR, "The hub is unavailable: try again", request_id=request_id
    )
