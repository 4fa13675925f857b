"""The node's periodic sweep: heartbeat timeouts, idle streams, expired
tokens, and the cluster tick, for every connection at once.

One task per node, not one per connection: it wakes every
``min(heartbeat_timeout, stream_idle_timeout) / 4`` (at most 5 s; a quarter of
``token_refresh_grace`` when JWTs can expire).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from hub.config.settings import Settings
from hub.core.frames import OutFrame
from hub.core.registry import Registry
from hub.errors import BackplaneUnavailable
from hub.handlers.publishing import Publishing
from hub.handlers.token_expiry import TokenExpiry
from protocol import codec


class Sweeper:
    def __init__(
        self,
        settings: Settings,
        registry: Registry[Any],
        publishing: Publishing,
        expiry: TokenExpiry,
        *,
        settle: Callable[[], Awaitable[None]],
        preframe: bool,
        log: Any,
    ):
        self.settings = settings
        self.registry = registry
        self.publishing = publishing
        self.expiry = expiry
        self._settle = settle
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
        s = self.settings
        interval = self.interval
        loop = asyncio.get_running_loop()
        next_tick = loop.time() + s.heartbeat_interval
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            try:
                await self.sweep(now)
                if now >= next_tick:
                    next_tick = now + s.heartbeat_interval
                    await self._settle()
            except Exception:
                self._log.exception("sweep failed")

    async def sweep(self, now: float) -> None:
        idle = self.settings.stream_idle_timeout
        wall = time.time()  # token expiry is wall-clock time (a JWT's exp)
        expiry = self.expiry
        for peer in self.registry:
            session = peer.session
            if session is None or peer.closing:
                continue
            close = session.check_liveness(now)
            if close is not None:
                peer.close_for(close.code, close.error, close.reason)
                continue
            if session.grant.expires_at is not None and expiry.sweep(peer, wall):
                continue
            if session.open_streams:
                for cancel in session.expire_streams(now, idle):
                    with contextlib.suppress(BackplaneUnavailable):
                        await self.publishing.stream_cancel(peer, cancel)
        # Streams whose publisher's node went away without a last frame.
        for record in self.registry.expire_streams(now, idle * 2):
            frame = codec.cancel_notice(
                record.space, record.stream_id, record.publisher, "idle_timeout"
            )
            out = OutFrame(frame, self._preframe)
            for member in record.audience:
                member.push(out)
