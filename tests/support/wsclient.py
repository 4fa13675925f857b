"""A raw protocol client for tests that check the wire itself.

It sends exactly the frames a test writes (garbage included) and reads frames
as dicts. A background task keeps reading the socket into a local queue, like
any real client, so unread frames never stall the connection; a test that
wants a consumer which stops reading calls ``ws.transport.pause_reading()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

DEFAULT_TIMEOUT = 10.0
_ids = itertools.count(1)
_CLOSED = object()


class WsClient:
    def __init__(self, ws: ClientConnection, agent_id: str):
        self.ws = ws
        self.agent_id = agent_id
        self.registered: dict[str, Any] | None = None
        self.backlog: list[dict[str, Any]] = []
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._reader = asyncio.get_running_loop().create_task(self._read())
        self._heartbeat: asyncio.Task[None] | None = None

    def start_heartbeat(self) -> None:
        """Send ``agent.heartbeat`` on the hub's interval, like a real client.

        Its replies (no ``id``) are dropped by the reader so tests don't see them.
        """
        assert self.registered is not None
        interval = self.registered["heartbeat_interval"] / 1000

        async def beat() -> None:
            with contextlib.suppress(ConnectionClosed):
                while True:
                    await asyncio.sleep(interval)
                    await self.ws.send('{"type":"agent.heartbeat"}')

        self._heartbeat = asyncio.get_running_loop().create_task(beat())

    @classmethod
    async def connect(
        cls,
        url: str,
        agent_id: str,
        *,
        token: str | None = None,
        registered: bool = True,
        heartbeat: bool = False,
        **kwargs: Any,
    ) -> WsClient:
        """Connect to ``url`` (the hub's /ws URL, no query) as ``agent_id``.

        ``heartbeat=True`` keeps the connection alive on the hub's interval.
        """
        query = f"agent_id={agent_id}" + (f"&token={token}" if token is not None else "")
        kwargs.setdefault("max_size", None)
        kwargs.setdefault("ping_interval", None)
        kwargs.setdefault("compression", None)
        kwargs.setdefault("close_timeout", 5)
        ws = await connect(f"{url}?{query}", open_timeout=DEFAULT_TIMEOUT, **kwargs)
        client = cls(ws, agent_id)
        if registered:
            client.registered = await client.expect("agent.registered")
            if heartbeat:
                client.start_heartbeat()
        return client

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                if (
                    self._heartbeat is not None
                    and raw.startswith('{"type":"agent.heartbeat"')
                    and '"id":' not in raw
                ):
                    continue  # a reply to our own automatic heartbeat
                self._queue.put_nowait(raw)
        except ConnectionClosed:
            pass
        finally:
            self._queue.put_nowait(_CLOSED)

    async def _next(self) -> dict[str, Any]:
        if self.backlog:
            return self.backlog.pop(0)
        raw = await self._queue.get()
        if raw is _CLOSED:
            self._queue.put_nowait(_CLOSED)
            raise self.ws.protocol.close_exc
        return orjson.loads(raw)

    async def send(self, msg: dict[str, Any] | str | bytes) -> None:
        if isinstance(msg, dict):
            await self.ws.send(orjson.dumps(msg).decode())
        else:
            await self.ws.send(msg)

    async def recv(self, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            return await self._next()

    async def expect(self, kind: str, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """The next frame, which must be of type ``kind``."""
        msg = await self.recv(timeout)
        assert msg.get("type") == kind, f"expected {kind}, got {msg}"
        return msg

    async def wait_for(
        self, kind: str, timeout: float = DEFAULT_TIMEOUT, **fields: Any
    ) -> dict[str, Any]:
        """Skip frames until one of type ``kind`` whose fields match; others are kept."""
        return await self._until(
            lambda m: m.get("type") == kind and all(m.get(k) == v for k, v in fields.items()),
            timeout,
        )

    async def request(
        self, msg: dict[str, Any], timeout: float = DEFAULT_TIMEOUT
    ) -> dict[str, Any]:
        """Send with a fresh ``id``; return the reply or error carrying that id."""
        rid = msg.setdefault("id", f"r{next(_ids)}")
        await self.send(msg)

        def is_reply(m: dict[str, Any]) -> bool:
            if m.get("id") != rid and m.get("request_id") != rid:
                return False
            # An event carrying someone else's request id is not our reply.
            return m.get("type") == "error" or m.get("from", self.agent_id) == self.agent_id

        return await self._until(is_reply, timeout)

    async def _until(self, match: Any, timeout: float) -> dict[str, Any]:
        skipped: list[dict[str, Any]] = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    msg = await self._next()
                    if match(msg):
                        return msg
                    skipped.append(msg)
        finally:
            self.backlog[:0] = skipped

    async def join(self, space: str) -> dict[str, Any]:
        reply = await self.request({"type": "space.join", "space": space})
        assert reply["type"] == "space.joined", reply
        return reply

    async def closed(self, timeout: float = DEFAULT_TIMEOUT) -> tuple[int | None, list[dict]]:
        """Read until the hub closes; returns (close code, frames read on the way)."""
        frames: list[dict[str, Any]] = []
        with contextlib.suppress(ConnectionClosed):
            async with asyncio.timeout(timeout):
                while True:
                    frames.append(await self._next())
        rcvd = self.ws.protocol.close_rcvd
        return (rcvd.code if rcvd is not None else None), frames

    async def close(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        await self.ws.close()
        with contextlib.suppress(Exception):
            await self._reader
