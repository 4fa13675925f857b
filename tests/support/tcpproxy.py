"""A small TCP proxy for tests that need to cut connections or move clients.

Clients connect to the proxy's port; each connection is forwarded to the
first reachable port of ``targets`` (so when a node dies its clients come
back on the next one, as behind a load balancer) — or, with
``round_robin=True``, to the next reachable one in turn. :meth:`TcpProxy.drop`
cuts every open connection (a network failure, both ends see a reset),
:meth:`TcpProxy.drop_one` one of them, and :meth:`TcpProxy.cut_when` cuts a
connection instead of forwarding a hub-to-client chunk that matches (the
reply never arrives). :meth:`TcpProxy.refuse` cuts every connection and turns
new ones away until :meth:`TcpProxy.admit` (one client's network down for a
while, the target still up for everyone else).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable

from tests.support.servers import free_port


class TcpProxy:
    def __init__(self, targets: list[int], host: str = "127.0.0.1", round_robin: bool = False):
        self.targets = list(targets)
        self.round_robin = round_robin
        self._next = 0
        self.host = host
        self.port = free_port()
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._cut: Callable[[bytes], bool] | None = None
        self._refusing = False

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}/ws"

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        return self

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        self.drop()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def drop(self) -> int:
        """Cut every open connection now; returns how many."""
        pairs, self._pairs = self._pairs, set()
        for client, upstream in pairs:
            for writer in (client, upstream):
                writer.transport.abort()
        return len(pairs)

    def drop_one(self, rng: random.Random) -> bool:
        """Cut one open connection chosen by ``rng``; False if there is none."""
        if not self._pairs:
            return False
        pair = rng.choice(sorted(self._pairs, key=id))
        self._pairs.discard(pair)
        for writer in pair:
            writer.transport.abort()
        return True

    def refuse(self) -> int:
        """Cut every open connection and turn new ones away until :meth:`admit`."""
        self._refusing = True
        return self.drop()

    def admit(self) -> None:
        """Forward new connections again (after :meth:`refuse`)."""
        self._refusing = False

    def cut_when(self, match: Callable[[bytes], bool] | None) -> None:
        """Cut a connection instead of forwarding hub-to-client bytes that ``match``."""
        self._cut = match

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refusing:
            writer.transport.abort()
            return
        upstream = None
        order = self.targets
        if self.round_robin:
            self._next = (self._next + 1) % len(order)
            order = order[self._next :] + order[: self._next]
        for port in order:
            try:
                up_reader, up_writer = await asyncio.open_connection(self.host, port)
            except OSError:
                continue
            upstream = (up_reader, up_writer)
            break
        if upstream is None:
            writer.transport.abort()
            return
        up_reader, up_writer = upstream
        pair = (writer, up_writer)
        self._pairs.add(pair)
        self.connections += 1
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, pair, False),
                self._pipe(up_reader, writer, pair, True),
            )
        finally:
            self._pairs.discard(pair)
            for w in pair:
                w.transport.abort()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
        to_client: bool,
    ) -> None:
        try:
            while data := await reader.read(65536):
                if to_client and self._cut is not None and self._cut(data):
                    self._cut = None
                    for w in pair:
                        w.transport.abort()
                    return
                writer.write(data)
                await writer.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            for w in pair:
                w.transport.abort()
