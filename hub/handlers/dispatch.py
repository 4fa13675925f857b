"""From a peer's frame to what it asked for: the session decides, handlers act.

:meth:`Dispatcher.receive` feeds one inbound frame to the peer's
:class:`~hub.core.session.Session` and runs each action it returns with the
handler registered for that action type. Failures become ``error`` events for
that peer only — a refusal (``ProtocolError``), a full space, an unreachable
backplane, or a bug (``INTERNAL_ERROR``, logged) — and never escape into the
connection loop. WebSocket connections and virtual members go through here
alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from hub.core.actions import Action
from hub.core.counters import Counters
from hub.core.peer import Peer
from hub.errors import BackplaneUnavailable, SpaceFull
from protocol import codec
from protocol.errors import ErrorCode, ProtocolError

RequestId = str | int | None
Handler = Callable[[Any, Any], Awaitable[None] | None]


class ErrorSender:
    """Sends a peer an ``error`` event and counts it."""

    __slots__ = ("_counters",)

    def __init__(self, counters: Counters):
        self._counters = counters

    def __call__(self, peer: Peer, code: ErrorCode, message: str, request_id: RequestId) -> None:
        self._counters.errors[code] += 1
        peer.send_frame(codec.error(code, message, request_id))


class Dispatcher:
    """Runs each action with the handler for its type (one per action type)."""

    def __init__(
        self, counters: Counters, send_error: ErrorSender, handlers: Mapping[type, Handler]
    ):
        self._counters = counters
        self._send_error = send_error
        self._handlers = dict(handlers)
        self._log = structlog.get_logger("hub")

    async def receive(self, peer: Peer, frame: str | bytes, now: float) -> None:
        """Handle one inbound frame of ``peer`` completely."""
        session = peer.session
        if session is None:
            return
        self._counters.messages_in += 1
        for action in session.receive(frame, now):
            await self.run(peer, action)

    async def run(self, peer: Peer, action: Action) -> None:
        counters = self._counters
        try:
            result = self._handlers[type(action)](peer, action)
            if result is not None:
                await result
        except ProtocolError as exc:
            self._send_error(peer, exc.code, exc.message, exc.request_id)
        except SpaceFull as exc:
            self._send_error(peer, ErrorCode.SPACE_FULL, str(exc), _rid(action))
        except BackplaneUnavailable as exc:
            counters.backplane_errors += 1
            self._send_error(
                peer, ErrorCode.UNAVAILABLE, f"{exc}: request not carried out", _rid(action)
            )
        except Exception:
            self._log.exception(
                "action failed", action=type(action).__name__, agent_id=peer.agent_id
            )
            self._send_error(peer, ErrorCode.INTERNAL_ERROR, "internal error", _rid(action))


def _rid(action: Action) -> RequestId:
    return getattr(action, "request_id", None)
