"""Where a node's JSON log lines go: one buffer in front of stderr.

A node logs a line per connection opened and per connection closed. In a
reconnect storm or a mass join the event loop takes about one connection
per iteration, so writing each line at once (``PYTHONUNBUFFERED``, usual in
containers, makes even ``sys.stderr.buffer`` unbuffered) cost one ``write``
system call per connection — a third of all the node's writes in a join.

:class:`BufferedLines` writes an info or debug line at once when nothing
was written in the last :data:`FLUSH_INTERVAL`; lines coming faster wait,
and are written together an interval after the last write (or when
:data:`FLUSH_BYTES` wait). A warning or an error, any line from the stdlib loggers
(websockets, redis: :class:`TextLines`), and every line written outside a
running event loop (start-up, shutdown) is written at once, behind whatever
waits: the order of lines holds. Lines still waiting when the process
exits are written by an ``atexit`` hook; a process killed outright loses at
most :data:`FLUSH_INTERVAL` of info lines.
"""

from __future__ import annotations

import asyncio
import atexit
import time
from typing import Any, BinaryIO

#: How long an info or debug line may wait before it is written.
FLUSH_INTERVAL = 0.1
#: Waiting lines are written at once when they reach this many bytes.
FLUSH_BYTES = 64 * 1024


class BufferedLines:
    """Lines of bytes for one file, written together (see the module)."""

    __slots__ = ("_file", "_last", "_loop", "_pending", "_size", "_timer", "interval")

    def __init__(self, file: BinaryIO, interval: float = FLUSH_INTERVAL) -> None:
        self._file = file
        self.interval = interval
        self._pending: list[bytes] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last = -interval  # when lines were last written (time.monotonic)
        atexit.register(self.flush)

    def write(self, line: bytes) -> None:
        """A line that may wait (info, debug)."""
        self._pending.append(line)
        self._size += len(line)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if self._timer is not None and self._loop is loop:
            if self._size >= FLUSH_BYTES:
                self.flush()
            return  # written with the others when the timer fires
        # A quiet node writes each line at once; lines coming faster than one
        # per interval wait for the next write, at most an interval after the last.
        wait = self._last + self.interval - time.monotonic()
        if wait <= 0 or self._size >= FLUSH_BYTES:
            self.flush()
        else:
            # (A timer of a loop that has since stopped never fires: replaced.)
            self._loop = loop
            self._timer = loop.call_later(wait, self.flush)

    def write_now(self, line: bytes) -> None:
        """A line written at once, behind what waits (warnings, errors)."""
        self._pending.append(line)
        self.flush()

    def flush(self) -> None:
        self._last = time.monotonic()
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()  # harmless for the timer that fired
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        self._size = 0
        try:
            view = memoryview(data)
            while view:
                # An unbuffered stderr (FileIO) may write part of it.
                written = self._file.write(view)
                if not written:
                    break
                view = view[written:]
            self._file.flush()
        except (OSError, ValueError):
            pass  # stderr closed or gone: nowhere to log that


class LineLogger:
    """structlog's logger for the hub's own lines (``BytesLogger``'s place):
    info and debug lines may wait, warnings and errors are written at once."""

    __slots__ = ("_out", "name")

    def __init__(self, out: BufferedLines, name: str | None) -> None:
        self._out = out
        self.name = name

    def msg(self, message: bytes) -> None:
        self._out.write(message + b"\n")

    def urgent(self, message: bytes) -> None:
        self._out.write_now(message + b"\n")

    log = debug = info = msg
    warn = warning = err = error = critical = exception = fatal = failure = urgent


class LineLoggerFactory:
    def __init__(self, out: BufferedLines) -> None:
        self.out = out

    def __call__(self, *args: Any) -> LineLogger:
        return LineLogger(self.out, args[0] if args else None)


class TextLines:
    """A text stream for a stdlib ``StreamHandler``: each record written at
    once, behind the hub's waiting lines."""

    __slots__ = ("_out",)

    def __init__(self, out: BufferedLines) -> None:
        self._out = out

    def write(self, text: str) -> None:
        self._out.write_now(text.encode("utf-8", "backslashreplace"))

    def flush(self) -> None:
        pass
