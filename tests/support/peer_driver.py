"""Driver subprocesses of the peer libraries (:mod:`tests.support.peer_venv`).

A peer is driven by a small script (``<peer>/driver.py``) run with its venv's
Python: the test writes a JSON spec to the script's stdin and reads JSON lines
from its stdout. Three shapes, shared by every peer:

* :func:`run_driver` / :func:`run_driver_sync` — a one-shot run (a client's
  plan of calls) whose whole stdout is the answer;
* :func:`spawn_driver` — a run whose records the test reads as they come;
* :class:`PeerServer` — a server that prints ``{"event": "listening", "port": …}``
  once it listens and then one record per call it served.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Self

from tests.support.peer_venv import peer_env


class PeerError(Exception):
    """A peer subprocess failed, timed out or printed something unreadable."""


def _output(what: str, returncode: int | None, stdout: bytes, stderr: bytes) -> bytes:
    if returncode != 0:
        raise PeerError(f"{what} exited {returncode}:\n{stderr.decode()[-3000:]}")
    return stdout


async def spawn_driver(python: Path, driver: Path, *args: str) -> asyncio.subprocess.Process:
    """The driver started with pipes on stdin, stdout and stderr."""
    return await asyncio.create_subprocess_exec(
        str(python), str(driver), *args, env=peer_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


async def run_driver(
    python: Path, driver: Path, *args: str, spec: bytes, timeout: float, what: str
) -> bytes:
    """The driver's stdout once it exits 0 after reading ``spec``; ``what``
    names it in the :class:`PeerError` raised otherwise."""
    proc = await spawn_driver(python, driver, *args)
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(spec), timeout)
    except TimeoutError:
        raise PeerError(f"{what} did not finish within {timeout} s") from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return _output(what, proc.returncode, stdout, stderr)


def run_driver_sync(
    python: Path, driver: Path, *args: str, spec: bytes, timeout: float, what: str
) -> bytes:
    """:func:`run_driver`, blocking."""
    try:
        done = subprocess.run(
            [str(python), str(driver), *args],
            input=spec, capture_output=True, timeout=timeout, env=peer_env(),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise PeerError(f"{what} did not finish within {timeout} s") from None
    return _output(what, done.returncode, done.stdout, done.stderr)


class PeerServer:
    """A running driver server on 127.0.0.1; :meth:`stop` is idempotent."""

    def __init__(self, python: Path, driver: Path, mode: str, spec: dict[str, Any], name: str):
        """``mode`` is the driver's argument; ``name`` names the server in errors."""
        self._command = [str(python), str(driver), mode]
        self._spec = spec
        self.name = name
        self._stderr = tempfile.TemporaryFile()
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._changed = threading.Condition()
        self._calls: list[dict[str, Any]] = []
        self._ended = False
        self._stderr_text: str | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def start(self, timeout: float) -> Self:
        """Start the driver and wait until it listens."""
        self._proc = subprocess.Popen(
            self._command, env=peer_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
        )  # fmt: skip
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(self._spec).encode())
        self._proc.stdin.close()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        with self._changed:
            ready = self._changed.wait_for(lambda: self.port is not None or self._ended, timeout)
        if self.port is None:
            self.stop()
            why = "exited" if ready else f"did not listen within {timeout} s"
            raise PeerError(f"{self.name} {why}:\n{self.stderr_text()[-3000:]}")
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            with self._changed:
                if record.get("event") == "listening":
                    self.port = record["port"]
                else:
                    self._calls.append(record)
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def calls(self) -> list[dict[str, Any]]:
        """The records of the calls the server served so far, in order."""
        with self._changed:
            return list(self._calls)

    def wait_for_calls(
        self, count: int, timeout: float = 10, *, event: str | None = None
    ) -> list[dict[str, Any]]:
        """The calls (of kind ``event``, when given) once there are ``count``."""

        def found() -> list[dict[str, Any]]:
            return [c for c in self._calls if event is None or c.get("event") == event]

        with self._changed:
            if not self._changed.wait_for(lambda: len(found()) >= count, timeout):
                raise PeerError(f"{self.name} saw {self._calls}, not {count} {event or 'calls'}")
            return found()

    def stderr_text(self) -> str:
        """The server's log (its request lines, the library's tracebacks)."""
        if self._stderr_text is not None:
            return self._stderr_text
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def stop(self, timeout: float = 10) -> int | None:
        """SIGTERM, then SIGKILL if it lingers; returns the exit code (0 = clean)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._reader is not None:
            self._reader.join(timeout)
        if not self._stderr.closed:
            self._stderr_text = self.stderr_text()
            self._stderr.close()
        return self.returncode
