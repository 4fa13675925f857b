"""The real PyPI ``mcp`` 2.3.0 client as a test peer, in its own cached venv.

It brings its own stack (httpx2, starlette, pydantic 2.14…), so it stays out of
the project's dependencies: :data:`VENV` builds a virtual environment with it
once (:mod:`tests.support.peer_venv`). Each run is a subprocess of that venv's
Python with ``mcp_peer/driver.py`` (:mod:`tests.support.peer_driver`), which
connects with ``mcp.client.Client`` and reports what the library saw, one JSON
line per step (:class:`McpPeer.session`).

:func:`require_mcp_peer` is what a fixture calls: it skips when the package
cannot be installed, except under ``CI=true`` where that is a failure.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.support.peer_driver import PeerError, spawn_driver
from tests.support.peer_venv import PeerUnavailable, PeerVenv

LIBRARY = "mcp"
VERSION = "2.3.0"
DRIVER = Path(__file__).with_name("mcp_peer") / "driver.py"
VENV = PeerVenv(
    f"{LIBRARY}-{VERSION}",
    [f"{LIBRARY}=={VERSION}"],
    "import httpx2, mcp.client, mcp.client.subscriptions",
    marker=".mcp-peer-ready",
)

McpPeerUnavailable = PeerUnavailable
McpPeerError = PeerError


def require_mcp_peer() -> McpPeer:
    """An :class:`McpPeer`, or skip the test (fail it under ``CI=true``)."""
    return McpPeer(VENV.require())


class PeerSession:
    """One driver run: read its records with :meth:`next`."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc

    async def next(self, timeout: float = 30) -> dict[str, Any]:
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except TimeoutError:
            raise McpPeerError(f"the mcp client said nothing for {timeout} s") from None
        if not line:
            assert self.proc.stderr is not None
            err = (await self.proc.stderr.read()).decode(errors="replace")
            raise McpPeerError(f"the mcp client exited:\n{err[-3000:]}")
        try:
            return json.loads(line)
        except ValueError:
            raise McpPeerError(f"unreadable output: {line[:500]!r}") from None


class McpPeer:
    def __init__(self, python: Path):
        self.python = python

    @asynccontextmanager
    async def session(
        self,
        url: str,
        steps: list[dict[str, Any]],
        *,
        mode: str = "auto",
        token: str | None = None,
    ) -> AsyncIterator[PeerSession]:
        """Run the driver against ``url``; the first record is the connection's."""
        spec = json.dumps({"url": url, "mode": mode, "token": token, "steps": steps}).encode()
        proc = await spawn_driver(self.python, DRIVER)
        assert proc.stdin is not None
        proc.stdin.write(spec)
        proc.stdin.close()
        try:
            yield PeerSession(proc)
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
