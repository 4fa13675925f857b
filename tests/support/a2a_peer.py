"""The real ``a2a-sdk`` 1.3.0 library as a test peer, in its own cached venv.

It stays out of the project's dependencies: :data:`VENV` builds a venv with
``a2a-sdk[http-server]==1.3.0`` and ``uvicorn`` once (:mod:`tests.support.peer_venv`),
and each peer runs as a subprocess of that venv's Python with
``a2a_peer/driver.py``:

* :meth:`A2aPeer.client` — the library's client runs a plan of calls against
  a URL (card, blocking and streaming ``send_message``, ``get_task``,
  ``cancel_task``) and returns what it got;
* :meth:`A2aPeer.server` — its ``DefaultRequestHandler`` with small executors
  (echo, streaming chunks, slow with cancel, input required) on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.support.peer_venv import PeerVenv, peer_env

VERSION = "1.3.0"
DRIVER = Path(__file__).with_name("a2a_peer") / "driver.py"
VENV = PeerVenv(
    f"a2a-sdk-{VERSION}",
    [f"a2a-sdk[http-server]=={VERSION}", "uvicorn"],
    "import a2a.client, a2a.server.routes, uvicorn, starlette",
)


class A2aPeerError(Exception):
    """A peer subprocess failed, timed out or printed something unreadable."""


class A2aPeer:
    def __init__(self, python: Path):
        self.python = python

    async def client(
        self, url: str, steps: list[dict[str, Any]], *, token: str | None = None,
        timeout: float = 60,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Run ``steps`` with the library's client; each step's result."""
        spec = json.dumps({"url": url, "token": token, "steps": steps}).encode()
        proc = await asyncio.create_subprocess_exec(
            str(self.python), str(DRIVER), "client", env=peer_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(spec), timeout)
        except TimeoutError:
            raise A2aPeerError(f"client did not finish within {timeout} s") from None
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        if proc.returncode != 0:
            raise A2aPeerError(f"client exited {proc.returncode}:\n{stderr.decode()[-3000:]}")
        try:
            return list(json.loads(stdout)["results"])
        except (ValueError, KeyError) as exc:
            raise A2aPeerError(f"client output unreadable ({exc}): {stdout[:500]!r}") from None

    async def server(self, *, streaming: bool = True, name: str = "sdk-echo") -> A2aServer:
        spec = {"streaming": streaming, "name": name}
        return await asyncio.to_thread(lambda: A2aServer(self.python, spec).start(30))


class A2aServer:
    """A running a2a-sdk server; :meth:`stop` is idempotent."""

    def __init__(self, python: Path, spec: dict[str, Any]):
        self._python = python
        self._spec = spec
        self._stderr = tempfile.TemporaryFile()
        self._proc: subprocess.Popen[bytes] | None = None
        self._changed = threading.Condition()
        self._calls: list[dict[str, Any]] = []
        self._ended = False
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float) -> A2aServer:
        self._proc = subprocess.Popen(
            [str(self._python), str(DRIVER), "server"], env=peer_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
        )  # fmt: skip
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(self._spec).encode())
        self._proc.stdin.close()
        threading.Thread(target=self._read, daemon=True).start()
        with self._changed:
            self._changed.wait_for(lambda: self.port is not None or self._ended, timeout)
        if self.port is None:
            self.stop()
            raise A2aPeerError(f"a2a-sdk server did not start:\n{self.stderr()[-3000:]}")
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
        with self._changed:
            return list(self._calls)

    async def wait_for(self, event: str, count: int = 1, timeout: float = 15) -> list[dict]:
        """The calls of kind ``event`` once there are ``count`` of them."""

        def enough() -> list[dict[str, Any]] | None:
            with self._changed:
                self._changed.wait_for(
                    lambda: sum(c["event"] == event for c in self._calls) >= count, timeout
                )
                found = [c for c in self._calls if c["event"] == event]
            return found if len(found) >= count else None

        found = await asyncio.to_thread(enough)
        if found is None:
            raise A2aPeerError(f"the a2a-sdk server saw {self.calls()}, not {count} {event}")
        return found

    def stderr(self) -> str:
        if self._stderr.closed:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def stop(self, timeout: float = 10) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if not self._stderr.closed:
            self._stderr.close()
