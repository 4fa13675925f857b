"""HTTP/1.1 over a bare socket, for sending what no HTTP client library would.

:func:`exchange` writes any bytes and reads one response (or the connection
closing); :func:`closed` waits for the hub to close a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

#: Generous: a busy two-core machine, never a timing assertion.
TIMEOUT = 20.0


@dataclass
class Reply:
    """One response; ``status`` None when the connection closed without one."""

    status: int | None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    raw: bytes = b""

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


def build(
    method: str,
    path: str,
    body: bytes | str = b"",
    headers: dict[str, str] | None = None,
    *,
    length: int | None = None,
) -> bytes:
    """A request with ``Host`` and ``Content-Length`` (``length`` overrides it)."""
    data = body.encode() if isinstance(body, str) else body
    lines = [f"{method} {path} HTTP/1.1", "Host: hub"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if data or length is not None or method in ("POST", "PUT", "DELETE"):
        lines.append(f"Content-Length: {len(data) if length is None else length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data


async def exchange(port: int, data: bytes, timeout: float = TIMEOUT) -> Reply:
    """Send ``data`` on a new connection and read the first response."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        with contextlib.suppress(ConnectionError):
            writer.write(data)
            await writer.drain()
        async with asyncio.timeout(timeout):
            return await read_reply(reader)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def read_reply(reader: asyncio.StreamReader, *, no_body: bool = False) -> Reply:
    """One response from ``reader``: status, headers and a Content-Length body
    (or everything up to the close; none when ``no_body``: a HEAD request's)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        return Reply(None, raw=exc.partial)
    except ConnectionError:
        return Reply(None)
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith(("HTTP/1.", "HTTP/0.9")) or not rest[:3].isdigit():
        raise ValueError(f"not an HTTP response: {head[:200]!r}")
    status = int(rest[:3])
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    try:
        if no_body:
            body = b""
        elif "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        else:
            body = await reader.read()
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        body = getattr(exc, "partial", b"")
    return Reply(status, headers, body, head + body)


async def closed(reader: asyncio.StreamReader, timeout: float = TIMEOUT) -> bytes:
    """Everything the hub sends until it closes the connection (TimeoutError if
    it does not within ``timeout``)."""
    received = bytearray()
    async with asyncio.timeout(timeout):
        while True:
            try:
                chunk = await reader.read(65536)
            except ConnectionError:
                return bytes(received)
            if not chunk:
                return bytes(received)
            received += chunk
