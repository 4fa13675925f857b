"""The real PyPI ``mcp`` 2.3.0 client as a test peer, in its own cached venv.

It brings its own stack (httpx2, starlette, pydantic 2.14…), so it stays out of
the project's dependencies: the first use builds a virtual environment under
``~/.cache/agora-hub-tests/`` (or ``$MCP_PEER_CACHE``) and later runs reuse it.
Each run is a subprocess of that venv's Python with ``mcp_peer/driver.py``,
which connects with ``mcp.client.Client`` and reports what the library saw,
one JSON line per step (:class:`McpPeer.session`).

:func:`require_mcp_peer` is what a fixture calls: it skips when the package
cannot be installed, except under ``CI=true`` where that is a failure.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

LIBRARY = "mcp"
VERSION = "2.3.0"
DRIVER = Path(__file__).with_name("mcp_peer") / "driver.py"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
_MARKER = ".mcp-peer-ready"


class McpPeerUnavailable(Exception):
    """The library could not be installed (no index, no network …)."""


class McpPeerError(Exception):
    """The driver failed, timed out or printed something unreadable."""


def cache_dir() -> Path:
    configured = os.environ.get("MCP_PEER_CACHE")
    if configured:
        return Path(configured)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return base / "agora-hub-tests" / f"{LIBRARY}-{VERSION}-{tag}"


def ensure_venv(timeout: float = 900) -> Path:
    """The venv's Python, building the venv first if needed (under a file lock, so
    concurrent test runs build it once)."""
    venv = cache_dir()
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / _MARKER).is_file() and python.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)  # a half-built venv from a killed run
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
             "--quiet", f"{LIBRARY}=={VERSION}"],
            [str(python), "-c", "import httpx2, mcp.client, mcp.client.subscriptions"],
        ]  # fmt: skip
        for step in steps:
            try:
                done = subprocess.run(step, capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise McpPeerUnavailable(f"{LIBRARY}=={VERSION}: {exc}") from None
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip()[-2000:]
                raise McpPeerUnavailable(f"{LIBRARY}=={VERSION} could not be installed:\n{tail}")
        (venv / _MARKER).write_text(json.dumps({"version": VERSION}))
    return python


def require_mcp_peer() -> McpPeer:
    """An :class:`McpPeer`, or skip the test (fail it under ``CI=true``)."""
    try:
        return McpPeer(ensure_venv())
    except McpPeerUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI must run the MCP interop tests: {exc}")
        pytest.skip(str(exc))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,::1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    return env


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
        proc = await asyncio.create_subprocess_exec(
            str(self.python), str(DRIVER), env=_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdin is not None
        proc.stdin.write(spec)
        proc.stdin.close()
        try:
            yield PeerSession(proc)
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
