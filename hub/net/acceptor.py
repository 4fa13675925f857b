"""The WebSocket port's listening sockets, accepted from only while there is room.

The event loop's own server accepts every connection the kernel has
completed, as fast as it can: in a reconnect storm the hub would hold sockets
it has no handshake slot nor place in line for, and could only cut them — a
reset, which every client counts as a failed attempt and retries. The
:class:`Acceptor` accepts while :class:`~hub.net.handshake.HandshakeSlots`
has room and stops reading the listening sockets when it has none: the next
connections wait in the kernel's accept queue (``listen_backlog``), and past
that the kernel drops their SYNs, which the clients' kernels send again (after
1, 3, 7 s) within the same attempt. Nothing is held for them meanwhile, and a
client that gives up in the queue costs the hub one ``accept`` and a look at
the socket (:func:`hub.net.connection.client_gone`) when its turn comes.

It stands where websockets' ``Server`` expects an ``asyncio.Server``
(``close``, ``wait_closed``, ``is_serving``, ``start_serving``,
``serve_forever``, ``sockets``, ``get_loop``).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any

__all__ = ["Acceptor"]

log = logging.getLogger("agora_hub.net")

#: Connections accepted per readiness of a listening socket before the loop
#: runs other work (the rest are taken at its next turn).
BATCH = 64
#: After running out of file descriptors (EMFILE…): seconds before accepting again.
FD_PAUSE_S = 1.0
_FD_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Acceptor:
    """Accepts from ``sockets`` while ``room()`` (free slots and places in line)
    exceeds the connections accepted and not yet set up; :meth:`resume` when
    room frees."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sockets: list[socket.socket],
        factory: Callable[[], asyncio.Protocol],
        room: Callable[[], int],
        *,
        ssl_context: ssl.SSLContext | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ):
        self._loop = loop
        self._sockets = sockets
        self._factory = factory
        self._room = room
        self._tls: dict[str, Any] = {}
        if ssl_context is not None:
            self._tls = {
                "ssl": ssl_context,
                "ssl_handshake_timeout": ssl_handshake_timeout,
                "ssl_shutdown_timeout": ssl_shutdown_timeout,
            }
        self._serving = False
        self._reading = False
        self._closed = asyncio.Event()
        #: Connections being set up (connect_accepted_socket), kept referenced.
        self._starting: set[asyncio.Task[Any]] = set()

    # ── accepting ────────────────────────────────────────────────────────

    def resume(self) -> None:
        """Room freed: read the listening sockets again (if they are paused)."""
        if self._serving and not self._reading and self._has_room():
            self._read(True)
            # Connections already queued in the kernel do not make a socket
            # readable again: take them now.
            for sock in self._sockets:
                self._accept(sock)

    def _has_room(self) -> bool:
        return self._room() > len(self._starting)

    def _read(self, on: bool) -> None:
        if on == self._reading:
            return
        self._reading = on
        for sock in self._sockets:
            if on:
                self._loop.add_reader(sock.fileno(), self._accept, sock)
            else:
                self._loop.remove_reader(sock.fileno())

    def _accept(self, sock: socket.socket) -> None:
        has_room = self._has_room
        for _ in range(BATCH):
            if not self._serving:
                return
            if not has_room():
                self._read(False)  # the next wait in the kernel's queue
                return
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno == errno.ECONNABORTED:
                    continue  # gone before it was accepted
                if exc.errno in _FD_ERRORS:
                    log.warning("accepting connections paused for %g s: %s", FD_PAUSE_S, exc)
                    self._read(False)
                    self._loop.call_later(FD_PAUSE_S, self.resume)
                    return
                raise
            conn.setblocking(False)
            task = self._loop.create_task(
                self._loop.connect_accepted_socket(self._factory, conn, **self._tls)
            )
            self._starting.add(task)
            task.add_done_callback(self._started)

    def _started(self, task: asyncio.Task[Any]) -> None:
        self._starting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # A TLS handshake that failed or timed out: the connection is gone.
            log.debug("connection not set up: %s", task.exception())

    # ── what websockets' Server asks of an asyncio.Server ────────────────

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        if self._serving or self._closed.is_set():
            return
        self._serving = True
        self.resume()

    async def serve_forever(self) -> None:
        await self.start_serving()
        await self._closed.wait()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._sockets)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._serving = False
        self._read(False)
        for sock in self._sockets:
            sock.close()
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()
        if self._starting:
            await asyncio.gather(*self._starting, return_exceptions=True)
