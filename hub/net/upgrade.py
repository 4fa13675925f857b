"""The opening handshake's common case, read and answered without websockets' general code.

An agent's upgrade request nearly always arrives in one read, in plain
ASCII, and asks for no extension and no subprotocol. websockets reads every
request with a generator-based line parser and answers it through
``ServerProtocol.accept()``, which parses each header with its general
grammar — together about a sixth of the CPU a node spends on a new agent.
This module does that common case with one regular expression and an answer
template:

- :func:`parse_request` reads a request that is whole in one chunk of bytes
  (nothing after it), ASCII only, at most :data:`MAX_REQUEST_BYTES` and
  :data:`MAX_HEADERS` lines, with no body, into a :class:`PlainRequest`;
  anything else is None, and the bytes go to websockets' parser as before,
  which answers every malformed request as it always did.
- :func:`accept` answers a request websockets' ``accept()`` would take with
  no extension and no subprotocol: ``Upgrade: websocket``, ``Connection``
  naming ``upgrade``, a 16-byte ``Sec-WebSocket-Key`` and version 13. For
  anything else it returns None and ``accept()`` decides (a refusal, an
  extension to negotiate, a ``bearer.*`` subprotocol).

Both give what websockets gives for the same input: the same request (path,
headers, method, protocol; :func:`hub.net.ws_internals.request_from` makes
websockets' ``Request`` of it) and the same 101 bytes, headers in the same
order (tests/unit/net/test_upgrade.py compares them). No I/O, no websockets.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import hashlib
import re
import time
from dataclasses import dataclass

#: The request is at most this long (websockets allows 8 KiB per line).
MAX_REQUEST_BYTES = 8192
#: At most this many header lines (websockets allows 128).
MAX_HEADERS = 64

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

# Request line, then header lines: a token, a colon, visible ASCII, spaces or
# tabs (websockets' own grammar, without its ISO-8859-1 range), then the
# empty line ending the request — and nothing after it.
_REQUEST = re.compile(
    rb"([A-Z]{1,16}) (/[\x21-\x7e]*) (HTTP/1\.[01])\r\n"
    rb"((?:[-!#$%&'*+.^_`|~0-9a-zA-Z]+:[\t\x20-\x7e]*\r\n)*)\r\n"
)
_TOKEN = re.compile(r"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")


@dataclass(frozen=True, slots=True)
class PlainRequest:
    """A request as :func:`parse_request` read it."""

    method: str
    path: str
    protocol: str
    #: Header names in lower case to their values, in order (what websockets'
    #: ``Headers`` keeps as its index).
    index: dict[str, list[str]]
    #: ``(name, value)`` as sent, in order.
    pairs: list[tuple[str, str]]


def parse_request(data: bytes) -> PlainRequest | None:
    """The request ``data`` holds whole, as websockets would parse it, or None."""
    if len(data) > MAX_REQUEST_BYTES:
        return None
    match = _REQUEST.fullmatch(data)
    if match is None:
        return None
    method, path, protocol, block = match.groups()
    # ASCII only (the pattern): decoded once, then split.
    lines = block.decode("ascii").split("\r\n")
    lines.pop()  # after the last line's CRLF
    if len(lines) > MAX_HEADERS:
        return None
    # What Headers.__setitem__ builds, header by header: names in lower case
    # to their values, and the (name, value) pairs in order.
    index: dict[str, list[str]] = {}
    pairs: list[tuple[str, str]] = []
    for line in lines:
        name, _, value = line.partition(":")
        value = value.strip(" \t")
        lower = name.lower()
        values = index.get(lower)
        if values is None:
            index[lower] = [value]
        else:
            values.append(value)
        pairs.append((name, value))
    if "transfer-encoding" in index or "content-length" in index:
        return None  # websockets decides about a body
    return PlainRequest(
        method.decode("ascii"), path.decode("ascii"), protocol.decode("ascii"), index, pairs
    )


def accept(request: PlainRequest, server_header: str | None) -> bytes | None:
    """The 101 for ``request`` — when it is a plain upgrade needing no
    negotiation — as websockets' ``accept()`` and ``send_response()`` write it;
    None for anything ``accept()`` must decide."""
    if request.method != "GET" or request.protocol != "HTTP/1.1":
        return None
    index = request.index
    if "sec-websocket-extensions" in index or "sec-websocket-protocol" in index:
        return None
    if len(index.get("origin", ())) > 1:
        return None  # accept() refuses it
    if index.get("sec-websocket-version") != ["13"]:
        return None
    upgrade = index.get("upgrade")
    if upgrade is None or len(upgrade) != 1 or upgrade[0].lower() != "websocket":
        return None
    options = [o.strip(" \t") for value in index.get("connection", ()) for o in value.split(",")]
    if not all(_TOKEN.fullmatch(o) for o in options):  # an empty option too: accept() decides
        return None
    if not any(o.lower() == "upgrade" for o in options):
        return None
    key = index.get("sec-websocket-key")
    if key is None or len(key) != 1:
        return None
    try:
        if len(base64.b64decode(key[0].encode(), validate=True)) != 16:
            return None
    except binascii.Error:
        return None
    answer = base64.b64encode(hashlib.sha1(key[0].encode() + _GUID).digest())
    server = b"Server: %s\r\n" % server_header.encode() if server_header is not None else b""
    return (
        b"HTTP/1.1 101 Switching Protocols\r\nDate: %s\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n%s\r\n"
    ) % (_date(), answer, server)


_date_cache: tuple[int, bytes] = (0, b"")


def _date() -> bytes:
    """The ``Date`` header, formatted once a second."""
    global _date_cache
    now = int(time.time())
    second, text = _date_cache
    if second != now:
        text = email.utils.formatdate(now, usegmt=True).encode()
        _date_cache = (now, text)
    return text
