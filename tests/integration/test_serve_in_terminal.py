"""The hub as a person starts it: in a terminal.

``log_format = auto`` picks the console renderer when stderr is a terminal,
so tests that redirect output never run that path. Here ``agora-hub serve``
and ``make run`` run with stdout and stderr on a real pseudo-terminal; each
must serve ``/healthz``, register an agent, log its lines and stop on Ctrl-C
without a traceback. Every ``log_format`` × ``log_level`` starts the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from agora_client import Client
from tests.support.servers import ROOT, free_port

TIMEOUT = 60.0
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Terminal:
    """A child process whose stdin, stdout and stderr are one pseudo-terminal."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        master, slave = pty.openpty()
        base = {k: v for k, v in os.environ.items() if not k.startswith("AGORA_HUB_")}
        base.pop("CI", None)  # as typed by a person
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**base, "TERM": "xterm-256color", **(env or {})},
            start_new_session=True,  # Ctrl-C goes to its process group, as in a shell
        )
        os.close(slave)
        self._master = master
        self._screen = bytearray()
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                data = b""
            with self._changed:
                if not data:
                    self._changed.notify_all()
                    return
                self._screen += data
                self._changed.notify_all()

    @property
    def screen(self) -> str:
        """What the terminal shows, without colours."""
        with self._changed:
            return ANSI.sub("", self._screen.decode("utf-8", "replace"))

    def wait_for(self, text: str, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while text.encode() not in self._screen:
                if self.proc.poll() is not None and not self._reader.is_alive():
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.5))
            else:
                return
        raise AssertionError(f"{text!r} never appeared; the terminal shows:\n{self.screen}")

    def interrupt(self) -> int:
        """Ctrl-C, as a shell sends it (SIGINT to the foreground process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            status = self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            status = self.proc.wait()
        self._reader.join(10)
        os.close(self._master)
        return status


@contextlib.contextmanager
def terminal(argv: list[str]) -> Iterator[Terminal]:
    term = Terminal(argv)
    try:
        yield term
    finally:
        if term.proc.poll() is None:
            term.interrupt()


def get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status


async def register(url: str) -> str:
    async with Client(url, "terminal-agent", reconnect=False) as client:
        assert client.registration is not None
        return client.registration.connection_id


def check_serving(term: Terminal, port: int, http_port: int) -> None:
    term.wait_for("hub started")
    assert get(f"http://127.0.0.1:{port}/healthz") == 200
    assert get(f"http://127.0.0.1:{http_port}/healthz") == 200
    assert asyncio.run(register(f"ws://127.0.0.1:{port}/ws"))
    # The connection's own lines reach the terminal too (the console renderer).
    term.wait_for("connection closed")


def check_clean_exit(term: Terminal) -> None:
    status = term.interrupt()
    screen = term.screen
    assert "Traceback" not in screen, screen
    assert "Error" not in screen.replace("INTERNAL_ERROR", ""), screen
    assert status in (0, 130, -signal.SIGINT, 2), (status, screen)


def test_agora_hub_serve_in_a_terminal():
    port, http_port = free_port(), free_port()
    argv = [sys.executable, "-m", "hub", "serve", "--port", str(port)]
    with terminal([*argv, "--http-port", str(http_port)]) as term:
        check_serving(term, port, http_port)
        # The console renderer, not JSON: the level is a word in brackets.
        assert "[info" in term.screen and '"level"' not in term.screen, term.screen
        check_clean_exit(term)


def test_make_run_in_a_terminal():
    port, http_port = free_port(), free_port()
    args = f"ARGS=--port {port} --http-port {http_port}"
    with terminal(["make", "--no-print-directory", "run", args]) as term:
        check_serving(term, port, http_port)
        check_clean_exit(term)


@pytest.mark.parametrize("log_format", ["auto", "console", "json"])
@pytest.mark.parametrize("log_level", ["debug", "info", "warning", "error"])
def test_every_log_format_and_level_starts(log_format: str, log_level: str):
    port, http_port = free_port(), free_port()
    argv = [sys.executable, "-m", "hub", "serve", "--port", str(port), "--http-port"]
    argv += [str(http_port), "--log-format", log_format, "--log-level", log_level]
    with terminal(argv) as term:
        deadline = time.monotonic() + TIMEOUT
        while True:  # nothing is logged at warning and above: wait for the port
            with contextlib.suppress(OSError):
                if get(f"http://127.0.0.1:{port}/healthz") == 200:
                    break
            assert term.proc.poll() is None, term.screen
            assert time.monotonic() < deadline, term.screen
            time.sleep(0.1)
        assert asyncio.run(register(f"ws://127.0.0.1:{port}/ws"))
        if log_level in ("debug", "info"):
            term.wait_for("connection closed")
        else:
            assert "connection closed" not in term.screen
        check_clean_exit(term)
