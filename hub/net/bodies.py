"""Reading HTTP bodies with bounds, for the hub's servers and clients alike.

On the HTTP port, a route that takes a body reads it whole with
:func:`read_body` (413 past its limit) and, for JSON, :func:`parse_json`
(400 for invalid JSON, for nesting deeper than an event may carry, for
integers the hub could not carry exactly) — **before** it takes anything
scarce. Only a complete, valid request then takes a :class:`WaitingSlots`
slot to wait for its answer, so idle or malformed uploads never hold one.
How long a body may take is the server's business, not the route's: the
HTTP port itself answers 408 and closes a connection whose body falls behind
``http_body_min_rate`` (:mod:`hub.net.http`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import orjson
from aiohttp import StreamReader, web

from protocol import codec
from protocol.errors import ProtocolError

#: Deepest nesting an event may carry: the same bound as a frame's.
MAX_DEPTH = codec.MAX_DEPTH


class BodyRefused(Exception):
    """A request body the route will not take: ``status`` 400 or 413, and why
    (``message``; the parser's own words, when there are any, in ``detail``)."""

    def __init__(self, status: int, message: str, detail: str | None = None):
        super().__init__(f"{message}: {detail}" if detail else message)
        self.status = status
        self.message = message
        self.detail = detail


class SlotsFull(Exception):
    """Every waiting slot is taken: answer 503 with ``Retry-After``."""


async def read_at_most(stream: StreamReader, limit: int, length: int | None = None) -> bytes | None:
    """The whole body from ``stream``, or ``None`` as soon as it is known to be
    longer than ``limit`` bytes: from its declared ``length`` (Content-Length)
    before anything is read, else once more than ``limit`` bytes have come."""
    if length is not None and length > limit:
        return None
    if stream.is_eof() and stream.exception() is None:
        # The whole body came with the request's head (a small JSON call):
        # take what is buffered, no iterator and no waiting.
        whole = stream.read_nowait()
        return whole if len(whole) <= limit else None
    body = bytearray()
    async for chunk in stream.iter_any():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


async def read_body(request: web.BaseRequest, limit: int) -> bytes:
    """The request's whole body; :class:`BodyRefused`: 413 past ``limit`` bytes,
    400 when aiohttp cannot decode it (chunked framing, Content-Encoding)."""
    try:
        body = await read_at_most(request.content, limit, request.content_length)
    except web.RequestPayloadError:
        if request.protocol is not None:  # what follows a broken body cannot be trusted
            request.protocol.close()
        raise BodyRefused(400, "malformed request body") from None
    if body is None:
        raise BodyRefused(413, f"request body exceeds {limit} bytes")
    return body


def parse_json(raw: bytes, *, nesting: int = 0) -> Any:
    """``raw`` as JSON the hub can carry in an event, or :class:`BodyRefused` (400).

    ``nesting``: how many levels down the route publishes the document (the
    HTTP Agora bridge puts a request in ``data``, one level under the event),
    so that the event stays within :data:`MAX_DEPTH`, as a frame must.
    """
    try:
        text = raw.decode()
        obj = orjson.loads(text)
    except UnicodeDecodeError:
        raise BodyRefused(400, "malformed JSON", "the body is not UTF-8") from None
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc) or "recursion" in str(exc).lower():  # past orjson's own bound
            raise BodyRefused(400, _too_deep(MAX_DEPTH - nesting, nesting)) from None
        raise BodyRefused(400, "malformed JSON", str(exc)) from None
    check_json(text, obj, nesting=nesting)
    return obj


def check_json(text: str, obj: Any, *, nesting: int = 0) -> None:
    """:class:`BodyRefused` (400) unless ``obj`` (parsed from ``text``) fits in an
    event ``nesting`` levels down; the frames' own check (:mod:`protocol.codec`)."""
    try:
        codec.check_json_bounds(text, obj, max_depth=MAX_DEPTH - nesting)
    except ProtocolError as exc:
        message = exc.message
        if message.startswith("JSON nested deeper"):
            message = _too_deep(MAX_DEPTH - nesting, nesting)
        raise BodyRefused(400, message) from None


def _too_deep(limit: int, nesting: int) -> str:
    if not nesting:
        return f"JSON nested deeper than {limit} levels"
    levels = "level" if nesting == 1 else "levels"
    return (
        f"JSON nested deeper than {limit} levels: published, it sits {nesting} {levels} "
        f"down in an event, and an event nests at most {MAX_DEPTH}"
    )


class WaitingSlots:
    """At most ``limit`` requests waiting for an answer at once.

    Take a slot only around the wait, once the request is complete and valid::

        with slots.hold():  # SlotsFull when every slot is taken
            answer = await ask(...)
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.taken = 0

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        if self.taken >= self.limit:
            raise SlotsFull(f"{self.taken} requests are waiting already")
        self.taken += 1
        try:
            yield
        finally:
            self.taken -= 1
