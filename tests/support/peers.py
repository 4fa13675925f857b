"""A fake member for handler tests: a :class:`hub.core.peer.Peer` without a socket.

:class:`FakePeer` records every frame the node hands it (fan-out through the
registry and frames for it alone) and every close, and answers liveness
probes as told. Nothing is written anywhere; the tests read what it got.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from hub.core.agent_record import AgentRecord
from hub.core.frames import OutFrame
from hub.core.peer import CleanedUp, PeerKind
from hub.core.session import Session
from protocol import codec
from protocol.errors import CloseCode, ErrorCode


class FakePeer:
    """Records what reaches it; ``alive`` is its answer to a liveness probe."""

    preframed = True

    def __init__(
        self,
        agent_id: str,
        connection_id: str,
        *,
        kind: PeerKind = PeerKind.SOCKET,
        session: Session | None = None,
        record: AgentRecord | None = None,
        alive: bool = True,
    ):
        self.agent_id = agent_id
        self.connection_id = connection_id
        self.kind = kind
        self.session = session
        self.record = record
        self.cleaned_up = CleanedUp()
        self.alive = alive
        #: Payloads received, in order (fan-out and ``send_frame`` alike).
        self.frames: list[bytes] = []
        #: ``(code, error, reason)`` of the hub's close, once it closed this peer.
        self.closed_with: tuple[CloseCode, ErrorCode, str] | None = None
        self.closed = asyncio.Event()
        self.aborted = False
        #: Timeouts of the liveness probes it was asked.
        self.probes: list[float] = []
        #: What :meth:`backlog` reports (bytes "queued for the socket").
        self.queued = 0

    def __repr__(self) -> str:
        return f"FakePeer({self.agent_id!r}, {self.connection_id!r})"

    # ── Member / Peer ────────────────────────────────────────────────────

    @property
    def closing(self) -> bool:
        return self.closed_with is not None

    def push(self, frame: OutFrame) -> bool:
        if self.closing:
            return False
        self.frames.append(frame.payload)
        return True

    def send_frame(self, payload: bytes) -> bool:
        return self.push(OutFrame(payload))

    def backlog(self) -> int:
        return self.queued

    async def drain(self) -> None:
        return None

    def close_for(self, code: CloseCode, error: ErrorCode, reason: str) -> None:
        if self.closing:
            return
        self.frames.append(codec.error(error, reason))
        self.closed_with = (code, error, reason)
        if self.session is not None:
            self.session.begin_close()
        self.closed.set()

    def abort(self) -> None:
        self.aborted = True
        self.closed_with = self.closed_with or (CloseCode.GOING_AWAY, ErrorCode.INTERNAL_ERROR, "")
        self.closed.set()

    async def probe(self, timeout: float) -> bool:
        self.probes.append(timeout)
        return self.alive and not self.closing and timeout > 0

    # ── for the tests ────────────────────────────────────────────────────

    def messages(self, *types: str) -> list[dict[str, Any]]:
        """What it received, decoded; only of ``types`` when given."""
        got = [orjson.loads(f) for f in self.frames]
        return [m for m in got if not types or m.get("type") in types]

    def take(self, *types: str) -> list[dict[str, Any]]:
        """:meth:`messages`, then forget everything received so far."""
        got = self.messages(*types)
        self.frames.clear()
        return got

    def one(self, *types: str) -> dict[str, Any]:
        """The single message of ``types`` received (fails on none or several)."""
        got = self.messages(*types)
        assert len(got) == 1, got
        return got[0]

    def errors(self) -> list[tuple[str, Any]]:
        """``(code, request_id)`` of every ``error`` event received."""
        return [(m["code"], m.get("request_id")) for m in self.messages("error")]
