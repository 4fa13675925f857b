"""The node's periodic sweep: heartbeat timeouts, idle streams and expired
tokens, for every connection at once.

One task per node, not one per connection: it wakes every
``min(heartbeat_timeout, stream_idle_timeout) / 4`` (at most 5 s; a quarter of
``token_refresh_grace`` when JWTs can expire). The cluster's liveness beat is
not here: it runs far more often, on its own (``Node._beat_forever``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from hub.cluster.presence import AgentClaims
from hub.config.settings import Settings
from hub.core.actions import Close
from hub.core.frames import OutFrame
from hub.core.registry import Registry
from hub.core.stream_audiences import RelayedStream, StreamOp
from hub.errors import BackplaneUnavailable
from hub.handlers.dispatch import Dispatcher
from protocol import codec


class Sweeper:
    def __init__(
        self,
        settings: Settings,
        registry: Registry[Any],
        dispatcher: Dispatcher,
        *,
        preframe: bool,
        log: Any,
        claims: AgentClaims,
    ):
        self.settings = settings
        self.registry = registry
        self.dispatcher = dispatcher
        #: Asked whether the publisher of a quiet relayed stream is still there.
        self.claims = claims
        self._preframe = preframe
        self._log = log

    @property
    def interval(self) -> float:
        s = self.settings
        interval = max(0.02, min(s.heartbeat_timeout / 4, s.stream_idle_timeout / 4, 5.0))
        if s.auth_mode == "jwt":  # the only credentials that expire
            interval = max(0.02, min(interval, s.token_refresh_grace / 4))
        return interval

    async def run(self) -> None:
        interval = self.interval
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep(loop.time())
            except Exception:
                self._log.exception("sweep failed")

    async def sweep(self, now: float) -> None:
        """Ask every session what time has decided, and carry it out through
        the dispatcher — as if the connection had asked."""
        idle = self.settings.stream_idle_timeout
        wall = time.time()  # token expiry is wall-clock time (a JWT's exp)
        run = self.dispatcher.run
        for peer in self.registry:
            session = peer.session
            if session is None or peer.closing:
                continue
            close = session.check_liveness(now)
            if close is not None:
                await run(peer, close)
                continue
            if session.grant.expires_at is not None:
                expired = session.check_expiry(wall)
                if expired is not None:
                    await run(peer, expired)
                    if isinstance(expired, Close):
                        continue
            if session.open_streams:
                for cancel in session.expire_streams(now, idle):
                    await run(peer, cancel)
        # Streams whose publisher's node went away without a last frame: their
        # audience here gets a hub cancel, through the one fan-out loop.
        for record in self.registry.idle_streams(now, idle * 2):
            self.end(record, "idle_timeout", now)
        await self._end_orphans(now)

    async def _end_orphans(self, now: float) -> None:
        """A relayed stream whose publisher's connection is gone — its node
        died mid-stream and was reaped — ends as a disconnect ends it, once it
        has been quiet as long as a node takes to be declared dead, instead of
        at twice the stream idle timeout. Also when the agent is back on
        another connection (the SDKs reconnect at once): a stream belongs to
        the connection that opened it, never to the next one."""
        local = self.registry.agents
        for record in self.registry.idle_streams(now, self.settings.node_dead_after):
            if not record.publisher:
                continue  # the hub's own (a split publish)
            here = local.get(record.publisher)
            if here is not None:
                # Held here: exactly whether that connection has it open.
                session = here.session
                if session is None or record.stream_id in session.streams_in(record.space):
                    continue
                self.end(record, "publisher_disconnected", now)
                continue
            try:
                holder = await self.claims.get_agent(record.publisher)
            except BackplaneUnavailable:
                return  # the cluster cannot tell now: the next sweep asks again
            if holder is None or _connected_after(holder.connected_at, record, now):
                self.end(record, "publisher_disconnected", now)

    def end(self, record: RelayedStream[Any], reason: str, now: float) -> None:
        """End a relayed stream here: a hub cancel with ``reason`` to its audience."""
        notice = codec.cancel_notice(record.space, record.stream_id, record.publisher, reason)
        self.registry.deliver(
            record.space,
            OutFrame(notice, self._preframe),
            stream=record.stream_id,
            op=StreamOp.END,
            now=now,
        )


#: How much later than a stream's first frame (as this node saw it) its
#: publisher's current connection must have been accepted (as its node's
#: clock says) to be another connection than the stream's: clocks of nodes
#: differ by far less.
CLOCK_MARGIN = 1.0


def _connected_after(connected_at_ms: int, record: RelayedStream[Any], now: float) -> bool:
    """Was the holder's connection accepted after ``record`` opened (so it is
    not the connection that opened it)? ``now``: the clock of ``record``."""
    if not connected_at_ms:
        return False
    opened_wall = time.time() - (now - record.opened)
    return connected_at_ms / 1000 > opened_wall + CLOCK_MARGIN
