"""What a WebSocket handshake must pass before the upgrade (contract §2, §11).

- **Credentials**: the token comes as ``?token=``, ``Authorization: Bearer``
  or the subprotocol ``bearer.TOKEN`` (browsers cannot set headers; the hub
  then selects that subprotocol). Two different tokens, or one given twice,
  are ambiguous: HTTP 400.
- **Origins**: ``allowed_origins`` (default: any) refuses browser handshakes
  whose ``Origin`` is not listed with HTTP 403. A handshake without
  ``Origin`` is not a browser's and is let through.
- **Per-client connections**: ``max_connections_per_ip`` (0 = off) refuses a
  client IP holding that many connections with HTTP 429.
- **Handshakes in progress**: at most ``max_handshakes`` TCP connections may
  be in their opening handshake at once (from their request's first bytes:
  one whose client has not written yet holds no slot), each for at most
  ``handshake_timeout`` seconds (:class:`HandshakeDeadlines`); nine times as many
  wait in line (not read) for a free slot, within the same timeout; beyond
  that a new TCP connection is dropped at once, so stalled (slow-loris)
  handshakes cannot exhaust a node and a reconnect storm is absorbed, not
  refused. One whose client gave up while it waited in line is dropped
  when its turn comes, unread. Request
  lines and headers are bounded by websockets (8 KiB a line, 128 headers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import parse_qs

SUBPROTOCOL_PREFIX = "bearer."


class HandshakeRefused(Exception):
    """The handshake is answered with an HTTP error instead of an upgrade."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Credentials:
    agent_id: str
    token: str | None
    #: The ``bearer.*`` subprotocol to select, when the token came that way.
    subprotocol: str | None


def credentials(
    query: str | Mapping[str, list[str]], authorization: str | None, subprotocols: Sequence[str]
) -> Credentials | None:
    """The agent id and the one token of a handshake.

    ``query``: the query string, or it already parsed (``parse_qs``, blank
    values kept). None when there is not exactly one ``agent_id`` (the caller
    answers 400); raises :class:`HandshakeRefused` (400) when the token is
    ambiguous.
    """
    params = parse_qs(query, keep_blank_values=True) if isinstance(query, str) else query
    agent_ids = params.get("agent_id", [])
    found: list[str] = list(params.get("token", []))
    if authorization is not None:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            found.append(value.strip())
    offered = [p for p in subprotocols if p.startswith(SUBPROTOCOL_PREFIX)]
    if len(offered) > 1:
        raise HandshakeRefused(400, "more than one bearer.* subprotocol offered")
    subprotocol = offered[0] if offered else None
    if subprotocol is not None:
        found.append(subprotocol[len(SUBPROTOCOL_PREFIX) :])
    if len(found) > 1:
        raise HandshakeRefused(400, "token given more than once")
    if len(agent_ids) != 1:
        return None
    return Credentials(agent_ids[0], found[0] if found else None, subprotocol)


class OriginPolicy:
    """``allowed_origins``: exact origins (``https://app.example``) or ``*``."""

    def __init__(self, allowed: Sequence[str]):
        self._any = not allowed or "*" in allowed
        self._allowed = frozenset(o.rstrip("/").lower() for o in allowed)

    def check(self, origin: str | None) -> None:
        if self._any or origin is None:
            return
        if origin.rstrip("/").lower() not in self._allowed:
            raise HandshakeRefused(403, "origin not allowed")


class ConnectionsPerIp:
    """Open connections per client IP, bounded (0 = no bound)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._open: dict[str, int] = {}

    def acquire(self, ip: str) -> None:
        if self.limit <= 0:
            return
        n = self._open.get(ip, 0)
        if n >= self.limit:
            raise HandshakeRefused(429, f"too many connections from this address (limit {n})")
        self._open[ip] = n + 1

    def release(self, ip: str) -> None:
        if self.limit <= 0:
            return
        n = self._open.get(ip, 0) - 1
        if n > 0:
            self._open[ip] = n
        else:
            self._open.pop(ip, None)

    def __len__(self) -> int:
        return sum(self._open.values())


#: The waiting line, in handshake slots (``max_handshakes``): connections
#: whose request came while every slot was taken wait here, unread, rather
#: than being cut (a reset is a failed attempt its client retries). Nine:
#: with the default 1,000 slots, an all-at-once storm of 10,000 reconnects
#: waits whole (with four, 1,000-1,400 of them were reset and retried), while a
#: slow-loris still holds at most ten times the slots, each for the timeout.
LINE_FACTOR = 9


class HandshakeSlots:
    """TCP connections in their opening handshake, bounded, with a waiting line.

    At most ``limit`` connections are in their handshake at once (a connection
    takes a slot with its request's first bytes). One beyond
    waits in line (the caller stops reading it, keeping those bytes) for a slot another frees, up
    to ``line`` more (default ``LINE_FACTOR * limit``); only beyond the line is a connection
    dropped at once. So a reconnect storm is absorbed — its connections wait
    their turn, each still within its ``handshake_timeout`` — while a
    slow-loris attack holds at most ``limit + line`` connections, each for at
    most the timeout. A freed slot skips whoever in line has gone meanwhile
    (its client gave up waiting): that handshake is never read.
    """

    def __init__(self, limit: int, line: int | None = None):
        self.limit = limit
        self.line_limit = LINE_FACTOR * limit if line is None else line
        self.in_progress = 0
        self.refused = 0
        #: Connections skipped in line because their client had gone.
        self.abandoned = 0
        #: Waiting connections (insertion order is arrival order) → admit them.
        self._line: dict[object, Callable[[], bool]] = {}

    @property
    def waiting(self) -> int:
        return len(self._line)

    def acquire(self) -> bool:
        """A slot now, or False (then :meth:`wait` or drop)."""
        if self.in_progress >= self.limit:
            return False
        self.in_progress += 1
        return True

    def wait(self, key: object, admit: Callable[[], bool]) -> bool:
        """Queue ``key`` for the next free slot: ``admit()`` is called with the
        slot held and answers whether it took it (False: its client has gone,
        the slot passes on). False, and counted as refused, when the line is full."""
        if len(self._line) >= self.line_limit:
            self.refused += 1
            return False
        self._line[key] = admit
        return True

    def leave(self, key: object) -> None:
        """``key`` gave up waiting (its connection is gone)."""
        self._line.pop(key, None)

    def release(self) -> None:
        """A handshake is over: its slot passes to the first in line still
        there, if any."""
        line = self._line
        while line:
            key = next(iter(line))
            if line.pop(key)():
                return
            self.abandoned += 1
        self.in_progress -= 1


class Abortable(Protocol):
    def handshake_timed_out(self) -> None: ...


class HandshakeDeadlines:
    """``handshake_timeout`` for every connection in its handshake, on one timer.

    Each connection is noted with its deadline when it is accepted and
    forgotten when its handshake is over; one timer, set for the earliest
    deadline, cuts whoever is past theirs. All share one timeout, so arrival
    order is deadline order: expiring looks only at the connections it cuts.
    That replaces a timer (``asyncio.timeout``) set and cancelled per
    connection — a measurable share of accepting one.
    """

    def __init__(self, timeout: float, loop: asyncio.AbstractEventLoop | None = None):
        self.timeout = timeout
        self._loop = loop
        #: Connection → its deadline (loop time), in arrival order.
        self._open: dict[Abortable, float] = {}
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._open)

    def start(self, conn: Abortable) -> None:
        loop = self._loop or asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        self._open[conn] = deadline
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire, loop)

    def done(self, conn: Abortable) -> None:
        self._open.pop(conn, None)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time()
        pending = self._open
        while pending:
            conn, deadline = next(iter(pending.items()))
            if deadline > now:
                self._timer = loop.call_at(deadline, self._expire, loop)
                return
            del pending[conn]
            try:
                conn.handshake_timed_out()
            except Exception:  # one connection must not stop the others' deadlines
                continue
