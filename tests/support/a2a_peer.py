"""The real ``a2a-sdk`` 1.3.0 library as a test peer, in its own cached venv.

It stays out of the project's dependencies: :data:`VENV` builds a venv with
``a2a-sdk[http-server]==1.3.0`` and ``uvicorn`` once (:mod:`tests.support.peer_venv`),
and each peer runs as a subprocess of that venv's Python with
``a2a_peer/driver.py`` (:mod:`tests.support.peer_driver`):

* :meth:`A2aPeer.client` — the library's client runs a plan of calls against
  a URL (card, blocking and streaming ``send_message``, ``get_task``,
  ``cancel_task``) and returns what it got;
* :meth:`A2aPeer.server` — its ``DefaultRequestHandler`` with small executors
  (echo, streaming chunks, slow with cancel, input required) on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.support.peer_driver import PeerError, PeerServer, run_driver
from tests.support.peer_venv import PeerVenv

VERSION = "1.3.0"
DRIVER = Path(__file__).with_name("a2a_peer") / "driver.py"
VENV = PeerVenv(
    f"a2a-sdk-{VERSION}",
    [f"a2a-sdk[http-server]=={VERSION}", "uvicorn"],
    "import a2a.client, a2a.server.routes, uvicorn, starlette",
)


A2aPeerError = PeerError


class A2aPeer:
    def __init__(self, python: Path):
        self.python = python

    async def client(
        self, url: str, steps: list[dict[str, Any]], *, token: str | None = None,
        timeout: float = 60,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Run ``steps`` with the library's client; each step's result."""
        spec = json.dumps({"url": url, "token": token, "steps": steps}).encode()
        stdout = await run_driver(
            self.python, DRIVER, "client", spec=spec, timeout=timeout, what="client"
        )
        try:
            return list(json.loads(stdout)["results"])
        except (ValueError, KeyError) as exc:
            raise A2aPeerError(f"client output unreadable ({exc}): {stdout[:500]!r}") from None

    async def server(self, *, streaming: bool = True, name: str = "sdk-echo") -> A2aServer:
        spec = {"streaming": streaming, "name": name}
        server = A2aServer(self.python, DRIVER, "server", spec, "the a2a-sdk server")
        return await asyncio.to_thread(lambda: server.start(30))


class A2aServer(PeerServer):
    """A running a2a-sdk server; :meth:`stop` is idempotent."""

    async def wait_for(self, event: str, count: int = 1, timeout: float = 15) -> list[dict]:
        """The calls of kind ``event`` once there are ``count`` of them."""
        return await asyncio.to_thread(self.wait_for_calls, count, timeout, event=event)
