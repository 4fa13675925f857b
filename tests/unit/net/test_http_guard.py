"""hub.net.http_guard: the HTTP port's deadlines and fixed error pages.

A small aiohttp application behind GuardedAppRunner on a loopback socket
(port 0), talked to with raw bytes: a head that stalls gets a fixed 408 and
the connection closes (a connection that sends nothing is just closed), a
body slower than ``body_min_rate`` after ``body_timeout`` too — and its
handler sees the client gone —, an idle kept-alive connection is closed, and
a request aiohttp cannot parse or a handler that fails is answered in fixed
words that repeat nothing of the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.http_exceptions import BadStatusLine, InvalidHeader, LineTooLong

from hub.config.settings import Settings
from hub.core.counters import HttpStats
from hub.net.http_guard import (
    TIMED_OUT,
    GuardedAppRunner,
    HttpDeadlines,
    describe_parse_error,
)

WAIT = 10.0
QUICK = 0.3  # a deadline the tests let pass


class Port:
    """The guarded application, what its handlers saw, and raw connections to it."""

    def __init__(self, runner: GuardedAppRunner, stats: HttpStats, seen: list[Any]) -> None:
        self.runner = runner
        self.stats = stats
        self.seen = seen
        self.port = 0
        self.body_read = asyncio.Event()

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def exchange(self, data: bytes) -> bytes:
        """Send ``data`` and read until the port closes the connection."""
        reader, writer = await self.open()
        writer.write(data)
        try:
            return await asyncio.wait_for(reader.read(), WAIT)
        finally:
            writer.close()


@pytest.fixture
async def guarded() -> AsyncIterator[Callable[..., Any]]:
    runners: list[GuardedAppRunner] = []

    async def start(**deadlines: Any) -> Port:
        seen: list[Any] = []
        stats = HttpStats()

        async def echo(request: web.Request) -> web.Response:
            try:
                body = await request.read()
            except Exception as exc:  # the client is gone
                seen.append(exc)
                raise
            seen.append(len(body))
            return web.Response(text=f"read {len(body)}\n")

        async def fail(request: web.Request) -> web.Response:
            raise RuntimeError("internal detail: token s3cret")

        app = web.Application()
        app.router.add_get("/", echo)
        app.router.add_post("/", echo)
        app.router.add_get("/fail", fail)
        runner = GuardedAppRunner(app, HttpDeadlines(**deadlines), stats)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = Port(runner, stats, seen)
        port.port = runner.addresses[0][1]
        return port

    yield start
    for runner in runners:
        await runner.cleanup()


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


# ── deadlines ────────────────────────────────────────────────────────────────


async def test_a_head_that_stalls_gets_a_fixed_408_and_is_closed(guarded: Any) -> None:
    port = await guarded(header_timeout=QUICK)
    answer = await port.exchange(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    assert answer == TIMED_OUT
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert port.stats.header_timeouts == 1 and port.seen == []


async def test_a_connection_that_sends_nothing_is_closed_without_an_answer(
    guarded: Any,
) -> None:
    port = await guarded(header_timeout=QUICK)
    assert await port.exchange(b"") == b""
    assert port.stats.header_timeouts == 0, "nothing was asked: no timeout counted"


async def test_a_body_slower_than_the_minimum_rate_gets_408_and_its_handler_sees_it_gone(
    guarded: Any,
) -> None:
    port = await guarded(body_timeout=QUICK, body_min_rate=1000)
    answer = await port.exchange(
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"a" * 10
    )
    assert answer == TIMED_OUT
    for _ in range(100):  # the handler's read fails as the connection closes
        if port.seen:
            break
        await asyncio.sleep(0.01)
    (gone,) = port.seen
    assert isinstance(gone, ConnectionResetError) and str(gone) == "Request timed out"


async def test_a_body_that_keeps_up_is_read_whole(guarded: Any) -> None:
    port = await guarded(header_timeout=QUICK, body_timeout=QUICK, body_min_rate=1)
    reader, writer = await port.open()
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nConnection: close\r\n\r\nabc")
    await writer.drain()
    await asyncio.sleep(0.01)
    writer.write(b"def")
    answer = await asyncio.wait_for(reader.read(), WAIT)
    writer.close()
    assert status_of(answer) == 200 and answer.endswith(b"read 6\n")


async def test_an_idle_kept_alive_connection_is_closed_without_a_word(guarded: Any) -> None:
    port = await guarded(keepalive_timeout=QUICK)
    reader, writer = await port.open()
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"read 0\n"), WAIT)
    assert status_of(head) == 200
    assert await asyncio.wait_for(reader.read(), WAIT) == b""
    writer.close()
    assert port.stats.header_timeouts == 0


async def test_the_next_head_on_a_kept_alive_connection_has_its_deadline(guarded: Any) -> None:
    port = await guarded(header_timeout=QUICK, keepalive_timeout=WAIT * 10)
    reader, writer = await port.open()
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(await asyncio.wait_for(reader.readuntil(b"read 0\n"), WAIT)) == 200
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and no more
    answer = await asyncio.wait_for(reader.read(), WAIT)
    writer.close()
    assert answer == TIMED_OUT and port.stats.header_timeouts == 1


# ── fixed words ──────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("request_bytes", "words"),
    [
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\x01\r\n\r\n",
            b"malformed request",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nX-Token: s3cret" + b"a" * 9000 + b"\r\n\r\n",
            b"request line or header too long",
        ),
        (b"GET /s3cret HTTP/9.9\r\n\r\n", b"invalid request line"),
    ],
    ids=["bad-header", "long-header", "bad-line"],
)
async def test_a_request_that_cannot_be_parsed_is_answered_without_quoting_it(
    guarded: Any, request_bytes: bytes, words: bytes
) -> None:
    port = await guarded()
    answer = await port.exchange(request_bytes)
    assert status_of(answer) == 400
    body = answer.split(b"\r\n\r\n", 1)[1]
    assert body == b"400 Bad Request: " + words + b"\n"
    assert b"s3cret" not in answer


async def test_a_failing_handler_is_a_500_that_tells_nothing(guarded: Any) -> None:
    port = await guarded()
    answer = await port.exchange(b"GET /fail HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status_of(answer) == 500
    assert b"s3cret" not in answer and b"detail" not in answer


def test_parse_errors_are_described_in_fixed_words() -> None:
    assert describe_parse_error(LineTooLong(b"x" * 10, 5)) == "request line or header too long"
    assert describe_parse_error(BadStatusLine("GET s3cret")) == "invalid request line"
    assert describe_parse_error(InvalidHeader(b"s3cret")) == "invalid header"
    assert describe_parse_error(web.RequestPayloadError("s3cret")) == "malformed request body"
    assert describe_parse_error(ValueError("s3cret")) == "malformed request"
    assert describe_parse_error(None) == "malformed request"


def test_deadlines_come_from_the_http_settings() -> None:
    s = Settings(
        http_header_timeout=3.0, http_body_timeout=4.0, http_body_min_rate=500,
        http_keepalive_timeout=6.0,
    )  # fmt: skip
    assert HttpDeadlines.from_settings(s) == HttpDeadlines(3.0, 4.0, 500, 6.0)
