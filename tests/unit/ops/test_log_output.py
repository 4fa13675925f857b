"""hub.ops.log_output: info lines written together, warnings at once, order kept."""

from __future__ import annotations

import asyncio
import io
import logging
import sys

import orjson
import structlog

from hub.ops import log_output
from hub.ops.log_output import BufferedLines, LineLogger, TextLines


class Sink(io.RawIOBase):
    """An unbuffered file (stderr under PYTHONUNBUFFERED) that records each write;
    ``chunk`` caps how much one write takes, as a raw file may."""

    def __init__(self, chunk: int | None = None) -> None:
        self.writes: list[bytes] = []
        self.chunk = chunk
        self.written = asyncio.Event()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        data = bytes(data)[: self.chunk] if self.chunk else bytes(data)
        self.writes.append(data)
        self.written.set()
        return len(data)

    @property
    def text(self) -> bytes:
        return b"".join(self.writes)


def buffered(
    interval: float = 60, chunk: int | None = None
) -> tuple[Sink, BufferedLines, LineLogger]:
    """A sink, the buffer in front of it, and a hub logger writing through it."""
    sink = Sink(chunk)
    out = BufferedLines(sink, interval=interval)  # type: ignore[arg-type]
    return sink, out, LineLogger(out, "hub")


async def until(sink: Sink, condition, timeout: float = 5.0) -> None:
    """Wait, on the sink's writes, until ``condition()`` holds."""
    async with asyncio.timeout(timeout):
        while not condition():
            sink.written.clear()
            await sink.written.wait()


async def test_a_quiet_node_writes_at_once_and_a_busy_one_together_within_the_interval():
    sink, _, log = buffered(interval=0.5)
    log.info(b"alone")
    assert sink.writes == [b"alone\n"]  # nothing written lately: at once
    for i in range(100):
        log.info(b"line %d" % i)
    assert len(sink.writes) == 1  # coming fast: they wait
    await until(sink, lambda: len(sink.writes) == 2)
    assert sink.writes[1] == b"".join(b"line %d\n" % i for i in range(100))


async def test_a_warning_is_written_at_once_behind_the_lines_waiting():
    sink, _, log = buffered()
    log.info(b"first")  # written at once (quiet)
    log.info(b"opened")  # waits
    assert sink.text == b"first\n"
    log.warning(b"careful")
    assert sink.text == b"first\nopened\ncareful\n"
    log.error(b"bad")
    log.exception(b"worse")
    assert sink.text == b"first\nopened\ncareful\nbad\nworse\n"


async def test_stdlib_records_keep_their_place_among_the_hub_lines():
    sink, out, log = buffered()
    handler = logging.StreamHandler(TextLines(out))
    std = logging.getLogger("tests.log_output")
    std.propagate = False
    std.addHandler(handler)
    try:
        log.info(b"zeroth")  # at once (quiet)
        log.info(b"first")  # waits
        std.warning("from websockets, é")
        log.info(b"third")
    finally:
        std.removeHandler(handler)
    assert sink.text == "zeroth\nfirst\nfrom websockets, é\n".encode()
    out.flush()
    assert sink.text.endswith(b"third\n")


def test_outside_a_running_loop_every_line_is_written_at_once():
    sink, _, log = buffered()
    log.info(b"starting")
    assert sink.text == b"starting\n"


async def test_lines_reaching_the_byte_bound_are_written_at_once(monkeypatch):
    monkeypatch.setattr(log_output, "FLUSH_BYTES", 1000)
    sink, _, log = buffered()
    log.info(b"quiet")  # at once
    for _ in range(9):
        log.info(b"x" * 99)  # 900 bytes with newlines
    assert sink.text == b"quiet\n"
    log.info(b"x" * 99)
    assert len(sink.text) == 1006


async def test_a_partial_write_of_a_raw_file_is_completed():
    sink, _, log = buffered(chunk=7)
    log.info(b"a longer line than seven bytes")
    log.warning(b"and another")
    assert sink.text == b"a longer line than seven bytes\nand another\n"


async def test_a_loop_that_stopped_with_lines_waiting_does_not_hold_later_ones():
    sink, out, log = buffered()

    async def first() -> None:
        log.info(b"at once")
        log.info(b"waiting in the first loop")

    # Its timer belongs to a loop that is gone: a new loop's line starts its own.
    await asyncio.to_thread(asyncio.run, first())
    assert sink.text == b"at once\n"
    out.interval = 0.01
    log.info(b"from this loop")
    await until(sink, lambda: b"from this loop" in sink.text)
    assert sink.text == b"at once\nwaiting in the first loop\nfrom this loop\n"


async def test_configure_logging_json_lines_and_stdlib_records_in_order(monkeypatch):
    from hub.ops.logging import configure_logging

    sink = Sink()

    class Stderr:
        buffer = sink

        def isatty(self) -> bool:
            return False

        def write(self, text: str) -> int:  # pragma: no cover - not used in JSON mode
            raise AssertionError("JSON mode writes bytes through the buffer")

    monkeypatch.setattr(sys, "stderr", Stderr())
    saved = logging.getLogger().handlers
    try:
        configure_logging("info", "json")
        structlog.get_logger("hub").info("connection opened", agent_id="a")
        logging.getLogger("websockets.server").warning("handshake failed")
        structlog.get_logger("hub").debug("not at info")
        await until(sink, lambda: sink.text.count(b"\n") >= 2)
    finally:
        logging.getLogger().handlers = saved
        structlog.reset_defaults()
    lines = [orjson.loads(line) for line in sink.text.splitlines()]
    assert [(x["event"], x["level"], x["logger"]) for x in lines] == [
        ("connection opened", "info", "hub"),
        ("handshake failed", "warning", "websockets.server"),
    ]
