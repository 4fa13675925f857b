"""websockets' Sans-I/O server protocol, as a hub connection builds it.

``ServerProtocol.__init__`` (websockets 17) sets some thirty attributes per
connection, most of them to the same value every time. It draws a UUID
(a ``getrandom`` system call) that only websockets' debug lines read. It
starts the HTTP request parser, which the hub replaces at once when
:mod:`hub.net.upgrade` reads the request. And ``serve()`` wraps every
connection's ``select_subprotocol`` in a closure over the connection.

:class:`HubProtocol` is the same protocol with the constant attributes on
the class, the UUID drawn when first read, the request parser started when
the first bytes or the end of the stream reach websockets' parser, and the
``bearer.*`` subprotocol chosen from an attribute the handshake sets (no
closure, no cycle back to the connection). tests/unit/net/test_sansio.py
checks it against websockets' own ``ServerProtocol`` attribute by attribute.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from websockets.extensions import ServerExtensionFactory
from websockets.protocol import CONNECTING, SERVER, State
from websockets.server import ServerProtocol
from websockets.streams import StreamReader
from websockets.typing import LoggerLike, Subprotocol

__all__ = ["HubProtocol"]


class HubProtocol(ServerProtocol):
    """A ``ServerProtocol`` for one hub connection (see the module)."""

    # What websockets' __init__ sets to the same value for every connection
    # (assignments later make instance attributes, as before).
    side = SERVER
    current_size: int | None = None
    expect_continuation_frame = False
    origin = None
    extensions: Any = ()  # only ever replaced by accept(), never appended to
    subprotocol = None
    close_rcvd = None
    close_sent = None
    close_rcvd_then_sent = None
    handshake_exc = None
    eof_sent = False
    parser_exc = None
    origins = None  # the hub checks Origin itself (hub.net.handshake.OriginPolicy)
    available_subprotocols = None
    accept_called = False
    #: The ``bearer.*`` subprotocol the token came in: the only one ever selected.
    bearer_subprotocol: str | None = None

    def __init__(
        self,
        *,
        extensions: Sequence[ServerExtensionFactory] | None,
        max_size: int | None,
        logger: LoggerLike,
        state: State = CONNECTING,
    ) -> None:
        self.logger = logger
        self.debug = logger.isEnabledFor(logging.DEBUG)
        self.state = state
        self.max_message_size = max_size
        self.max_fragment_size = None
        self.available_extensions = extensions
        self.reader = StreamReader()
        self.events: list[Any] = []
        self.writes: list[bytes] = []
        self.parser: Any = None  # the request parser, once websockets' parser is fed

    @property
    def id(self) -> uuid.UUID:  # type: ignore[override]
        """websockets' connection id (its debug lines), drawn when first read."""
        ident = self.__dict__.get("_id")
        if ident is None:
            ident = self.__dict__["_id"] = uuid.uuid4()
        return ident

    def _start(self) -> None:
        self.parser = self.parse()
        next(self.parser)

    def receive_data(self, data: bytes | bytearray) -> None:
        if self.parser is None:
            self._start()
        super().receive_data(data)

    def receive_eof(self) -> None:
        if self.parser is None and not self.reader.eof:
            self._start()
        super().receive_eof()

    def select_subprotocol(self, subprotocols: Sequence[Subprotocol]) -> Subprotocol | None:
        """The ``bearer.*`` subprotocol the token came in, when offered (browsers
        require the server to select one they offered); no other is spoken."""
        chosen = self.bearer_subprotocol
        return chosen if chosen is not None and chosen in subprotocols else None  # type: ignore[return-value]
