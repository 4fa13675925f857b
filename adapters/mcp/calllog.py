"""The system space ``mcp.calls``: every tool call and its outcome, for observers.

Each ``tools/call`` becomes two hub-generated events there (``from: "@hub"``):

    {"event": "call",   "call_id", "tool", "caller", "node", "space",
     "arguments" | "arguments_bytes" | neither}
    {"event": "result", "call_id", "tool", "caller", "node", "space",
     "is_error", "error"?, "duration_ms"}

``space`` is the space the call targets (an agent tool: its owner's space;
null for ``spaces_list`` and ``agents_list`` without one). Agents may join
``mcp.calls`` to observe (their join claims apply); nobody may publish
there. An observer gets a call's events only if it may read (join) the space
the call targets (contract §18): the events are published addressed to the
``mcp`` agent, and each node's copy shows them to that node's observers the
hub's policy lets read that space (:meth:`~hub.adapter_host.SystemSpaces.show_readers`)
— the node where an observer is connected is the one that knows its
credentials. A call that targets no space is shown only to observers whose
credentials do not limit the spaces they may join. (So ``mcp.calls`` keeps
no history an observer can read back: its events are live.)

A ``notifications/cancelled`` that reaches a node not running the call it
names goes through here too: an event ``{"event": "cancel", "call": KEY}``
(``KEY`` a digest of the caller, session and request id — never the session
id itself) that every node's relay hears and none shows to observers: the
node running the call stops it.

The events are published by one background task, in order, so a call does
not wait for its own record; when more than ``max_pending`` are waiting (the
backplane is slow or down) new ones are dropped and counted rather than held
without bound.

Nobody watching, nothing published: the relay is a member of ``mcp.calls``
and hears its ``space.members`` events (``member_count`` is cluster-wide), and
the node knows its own members at once, so while the relay is the only member
a call's ``call`` and ``result`` events are not made at all — two system
publishes per call that nobody could receive (a ``cancel`` is for the nodes:
always published). An observer on the node serving a call sees it as soon
as it has joined; one on another node once its join reached this node's relay
(at once on a quiet space, within ``member_events_interval`` while joins and
leaves there are being coalesced). Until the count is known (the first read
at start), every call is published.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from collections import deque
from typing import Any

import orjson
import structlog

from hub.adapter_host import BackplaneUnavailable, SpaceReads, SystemSpaces

CALLS_SPACE = "mcp.calls"
#: ``from`` of the hub's own events.
HUB_SENDER = "@hub"
#: Arguments bigger than this (as JSON) are summarised by their size.
MAX_ARGUMENT_BYTES = 4096

log = structlog.get_logger("adapters.mcp")


def new_call_id() -> str:
    return secrets.token_hex(8)


def call_digest(caller: str, session_id: str, request_id: str | int) -> str:
    """Names a running call across nodes without showing its session id."""
    raw = orjson.dumps([caller, session_id, request_id])
    return hashlib.sha256(raw).hexdigest()[:32]


class CallLog:
    def __init__(self, node_id: str, max_pending: int, relay: str):
        """``relay``: the agent the events are addressed to, which shows them
        on every node (:meth:`show`)."""
        self.node_id = node_id
        self.relay = relay
        self.max_pending = max_pending
        self.dropped = 0
        self._pending: deque[dict[str, Any]] = deque()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._system: SystemSpaces | None = None
        self._spaces: SpaceReads | None = None
        #: Members of ``mcp.calls`` cluster-wide, the relay included (None: unknown).
        self._members: int | None = None

    @property
    def pending(self) -> int:
        """Events waiting to be published."""
        return len(self._pending)

    @property
    def observed(self) -> bool:
        """May anyone but the relay see the events (or is that not known)?"""
        if self._members is None or self._members > 1:
            return True
        # A join here is known at once; its space.members may be held back.
        return self._system is not None and self._system.local_members(CALLS_SPACE) > 1

    def start(self, system: SystemSpaces, spaces: SpaceReads) -> None:
        """Publish through ``system``; ``spaces`` counts who watches as it starts."""
        self._system, self._spaces = system, spaces
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def call(self, call_id: str, tool: str, caller: str, space: str | None, arguments: Any) -> None:
        """A call starts; ``arguments`` None: withheld (the event has neither
        ``arguments`` nor ``arguments_bytes``)."""
        if not self.observed:
            return
        event: dict[str, Any] = {"event": "call", **self._head(call_id, tool, caller, space)}
        if arguments is None:
            self._add(event)
            return
        encoded = orjson.dumps(arguments)
        if len(encoded) <= MAX_ARGUMENT_BYTES:
            event["arguments"] = arguments
        else:
            event["arguments_bytes"] = len(encoded)
        self._add(event)

    def result(
        self,
        call_id: str,
        tool: str,
        caller: str,
        space: str | None,
        error: str | None,
        seconds: float,
    ) -> None:
        if not self.observed:
            return
        event: dict[str, Any] = {"event": "result", **self._head(call_id, tool, caller, space)}
        event["is_error"] = error is not None
        if error is not None:
            event["error"] = error[:512]
        event["duration_ms"] = round(seconds * 1000, 1)
        self._add(event)

    def cancel(self, key: str) -> None:
        """Ask every node to stop the call ``key`` (a :func:`call_digest`)."""
        self._add({"event": "cancel", "call": key, "node": self.node_id})

    def _head(self, call_id: str, tool: str, caller: str, space: str | None) -> dict[str, Any]:
        return {
            "call_id": call_id, "tool": tool, "caller": caller, "node": self.node_id,
            "space": space,
        }  # fmt: skip

    def show(self, msg: dict[str, Any]) -> None:
        """An ``mcp.calls`` event that reached this node's relay: to the
        observers here who may read the space it targets. (A membership
        change there: who may be watching.)"""
        kind = msg.get("type")
        if kind == "space.members":
            count = msg.get("member_count")
            if isinstance(count, int):
                self._members = count
            return
        if self._system is None or kind != "space.event":
            return
        data = msg.get("data")
        if msg.get("from") != HUB_SENDER or not isinstance(data, dict):
            return
        if data.get("event") == "cancel":
            return  # for the nodes, not for observers
        space = data.get("space")
        self._system.show_readers(
            CALLS_SPACE, msg, space if isinstance(space, str) else None, relay=self.relay
        )

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
        assert self._system is not None
        await self._count_members()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                event = self._pending.popleft()
                try:
                    await self._system.publish_system(CALLS_SPACE, event, to=(self.relay,))
                except BackplaneUnavailable:
                    self.dropped += 1
                except Exception:
                    self.dropped += 1
                    log.exception("mcp.calls event not published")

    async def _count_members(self) -> None:
        """The members of ``mcp.calls`` as the relay starts (its events keep
        the count since); left unknown when the store cannot say."""
        assert self._spaces is not None
        try:
            records = await self._spaces.member_records(CALLS_SPACE, 8)
        except BackplaneUnavailable:
            return
        if self._members is None:  # a membership event did not tell first
            self._members = 2 if any(r.agent_id != self.relay for r in records) else 1
