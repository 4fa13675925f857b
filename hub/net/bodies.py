"""Reading an HTTP body with a bound, for the hub's servers and clients alike."""

from __future__ import annotations

from aiohttp import StreamReader


async def read_at_most(stream: StreamReader, limit: int, length: int | None = None) -> bytes | None:
    """The whole body from ``stream``, or ``None`` as soon as it is known to be
    longer than ``limit`` bytes: from its declared ``length`` (Content-Length)
    before anything is read, else once more than ``limit`` bytes have come."""
    if length is not None and length > limit:
        return None
    body = bytearray()
    async for chunk in stream.iter_any():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)
