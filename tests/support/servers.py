"""Real servers for tests: an in-process hub, hub processes, redis-server, nginx."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from adapters import from_settings
from hub.config.settings import load_settings
from hub.node.node import Node
from hub.process.server import HubServer

ROOT = Path(__file__).resolve().parents[2]


# Ports handed out by this process: never twice.
_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A port nothing listens on, for a server the test starts a moment later.

    Chosen below the kernel's ephemeral range: a port from the ephemeral
    range (``bind(0)``) may be taken as the source port of any outgoing
    connection between this call and the server's ``bind`` — with hundreds
    of clients connecting in a test run, that happens.
    """
    low, _ = _ephemeral_range()
    first = 10000 if low > 11000 else 1024
    for _ in range(1000):
        port = random.randrange(first, low)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as s:  # no luck below the range: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Settings that keep tests fast on a busy machine without tight timing.
FAST = {
    "http_port": 0,
    "heartbeat_interval": 0.5,
    "heartbeat_timeout": 5.0,
    "liveness_probe_timeout": 1.0,
    "close_timeout": 2.0,
    "shutdown_timeout": 5.0,
    "log_format": "json",
}


async def start_hub(*, adapters: Any = None, config: Any = None, **overrides: Any) -> HubServer:
    """A hub node in this process on free ports.

    It hosts ``adapters``, or (when None) the ones its settings configure, as
    ``agora-hub serve`` does; ``config`` is a TOML config file path.
    """
    settings = load_settings({"port": 0, **FAST, **overrides}, config)
    if adapters is None:
        adapters = from_settings(settings)
    server = HubServer(Node(settings, adapters=adapters))
    await server.start()
    return server


def _env_without_hub_settings() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AGORA_HUB_")}


class HubProcess:
    """``agora-hub serve`` as a real child process.

    ``env``: extra environment variables (the test's own ``AGORA_HUB_*`` are
    never passed on)."""

    def __init__(self, env: dict[str, str] | None = None, **settings: Any):
        self.env = env or {}
        self.settings = {**FAST, "port": free_port(), "http_port": free_port(), **settings}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = Path(tempfile.mkstemp(prefix="agora-hub-", suffix=".log")[1])
        self.url = f"ws://127.0.0.1:{self.settings['port']}/ws"
        self.http = f"http://127.0.0.1:{self.settings['port']}"
        #: The HTTP port (bridges, API, health).
        self.http_url = f"http://127.0.0.1:{self.settings['http_port']}"

    def start(self, timeout: float = 20.0) -> HubProcess:
        args = [sys.executable, "-m", "hub", "serve"]
        for name, value in self.settings.items():
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                args.append(flag if value else "--no-" + name.replace("_", "-"))
            else:
                args += [flag, str(value)]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**_env_without_hub_settings(), **self.env},
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hub exited early:\n{self.log()}")
            if b'"hub started"' in self.log_path.read_bytes():
                return self
            time.sleep(0.05)
        raise TimeoutError(f"hub did not start:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_bytes().splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                out.append(orjson.loads(line))
        return out

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait; returns the exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        with contextlib.suppress(Exception):
            self._log.close()


def redis_server_binary() -> str | None:
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )


class RedisServer:
    """A private ``redis-server`` on a free port that tests can stop and restart."""

    def __init__(self, binary: str, port: int | None = None):
        self.binary = binary
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir = tempfile.mkdtemp(prefix="agora-redis-")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
                "--protected-mode",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    async def wait_down(self) -> None:
        if self.proc is not None:
            await asyncio.to_thread(self.proc.wait)
