"""Real load balancers (nginx, HAProxy) running the configs in ``deploy/``.

A config runs as shipped except for what a test has to move: the listen
address, the node addresses (the i-th server of an upstream or backend named
``*_ws`` / ``*_http`` becomes the i-th test node's WebSocket / HTTP port) and
the files nginx writes (pid, logs, temp files), which go to a private
directory. The proxies start under an ordinary file-descriptor limit (soft
1024, hard 4096, as on a stock host), so a config that only starts with a
raised limit fails here.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.servers import ROOT, free_port

ORDINARY_NOFILE = (1024, 4096)

NGINX_CONF = ROOT / "deploy" / "nginx" / "nginx.conf"
NGINX_COMPOSE_CONF = ROOT / "deploy" / "nginx" / "compose.conf"
HAPROXY_CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"

_ADDRESS = re.compile(r"[\w.-]+:\d+")
_SERVER = re.compile(r"\s+server\s+(\S+\s+)?[\w.-]+:\d+")


def find_binary(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/local/sbin/{name}") if Path(p).exists()), None
    )


@dataclass(frozen=True)
class NodePorts:
    """Where a test node listens; ``http`` is None while the hub has no HTTP port."""

    ws: int
    http: int | None = None


def rewrite_servers(text: str, nodes: list[NodePorts], block: re.Pattern[str]) -> str:
    """Point each ``*_ws`` / ``*_http`` block's servers at the test nodes.

    ``block`` matches a block's first line with the block name as group 1; a
    block ends at a line with less indentation than its servers. A node
    without an HTTP port gets a closed port, so its HTTP server is down.
    """
    out: list[str] = []
    kind: str | None = None
    index = 0
    seen: dict[str, int] = {}
    closed = free_port()
    for line in text.splitlines():
        start = block.match(line)
        if start:
            name = start.group(1)
            kind = "ws" if name.endswith("_ws") else "http" if name.endswith("_http") else None
            index = 0
        elif re.match(r"\s*\}|\S", line):
            kind = None  # end of the block: "}" (nginx) or the next section (HAProxy)
        elif kind and _SERVER.match(line):
            if index >= len(nodes):
                continue  # more servers in the example than nodes in the test
            node = nodes[index]
            port = node.ws if kind == "ws" else (node.http or closed)
            line = _ADDRESS.sub(f"127.0.0.1:{port}", line, count=1)
            index += 1
            seen[kind] = index
        out.append(line)
    for kind in ("ws", "http"):
        if seen.get(kind, 0) < len(nodes):
            raise ValueError(f"config has fewer {kind} servers than the test's {len(nodes)} nodes")
    return "\n".join(out) + "\n"


def replace_once(pattern: str, repl: str, text: str) -> str:
    new, count = re.subn(pattern, repl, text, flags=re.M)
    if count != 1:
        raise ValueError(f"expected one match of {pattern!r} in the config, found {count}")
    return new


def ordinary_limits(cmd: list[str]) -> list[str]:
    """``cmd`` run under the ordinary file-descriptor limit (never above the current one)."""
    hard_now = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = (
        ORDINARY_NOFILE[1]
        if hard_now == resource.RLIM_INFINITY
        else min(ORDINARY_NOFILE[1], hard_now)
    )
    soft = min(ORDINARY_NOFILE[0], hard)
    return ["sh", "-c", f'ulimit -Sn {soft} && ulimit -Hn {hard} && exec "$0" "$@"', *cmd]


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"proxy exited: {log.read_text(errors='replace')}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"proxy did not start listening: {log.read_text(errors='replace')}")


class Proxy:
    kind = ""

    def __init__(self, binary: str, nodes: list[NodePorts]):
        self.binary = binary
        self.nodes = nodes
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"agora-{self.kind}-"))
        # nginx workers run as an unprivileged user when the test runs as root.
        self.dir.chmod(0o755)
        self.log = self.dir / "proxy.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> str:
        raise NotImplementedError

    def command(self, path: Path) -> list[str]:
        raise NotImplementedError

    def start(self) -> Proxy:
        path = self.dir / "proxy.conf"
        path.write_text(self.config())
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                ordinary_limits(self.command(path)), stdout=log, stderr=subprocess.STDOUT
            )
        _wait_port(self.port, self.proc, 10, self.log)
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Nginx(Proxy):
    kind = "nginx"
    CONFIG = NGINX_CONF

    def config(self) -> str:
        return nginx_test_config(self.CONFIG.read_text(), self.dir, self.port, self.nodes)

    def command(self, path: Path) -> list[str]:
        return [
            self.binary,
            "-p",
            str(self.dir),
            "-e",
            str(self.dir / "error.log"),
            "-c",
            str(path),
            "-g",
            "daemon off;",
        ]


def nginx_test_config(text: str, workdir: Path, port: int, nodes: list[NodePorts]) -> str:
    """A shipped nginx.conf with the listen port, nodes and file locations moved."""
    text = rewrite_servers(text, nodes, re.compile(r"\s*upstream (\S+) \{"))
    text = replace_once(r"^(\s*)listen 80;", rf"\g<1>listen 127.0.0.1:{port};", text)
    text = replace_once(r"^pid \S+;", f"pid {workdir}/nginx.pid;", text)
    text = replace_once(r"^error_log \S+", f"error_log {workdir}/error.log", text)
    text = replace_once(r"^(\s*)access_log \S+", rf"\g<1>access_log {workdir}/access.log", text)
    temp = "".join(
        f"    {kind}_temp_path {workdir}/{kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return replace_once(r"^http \{\n", "http {\n" + temp, text)


class HAProxy(Proxy):
    kind = "haproxy"
    CONFIG = HAPROXY_CFG

    def config(self) -> str:
        text = rewrite_servers(self.CONFIG.read_text(), self.nodes, re.compile(r"backend (\S+)"))
        text = replace_once(r"^(\s*)bind :80$", rf"\g<1>bind 127.0.0.1:{self.port}", text)
        if os.geteuid() != 0:
            # Only root can switch users; as root the shipped user/group apply.
            text = re.sub(r"^\s*(user|group) \S+\n", "", text, flags=re.M)
        return text

    def command(self, path: Path) -> list[str]:
        return [self.binary, "-db", "-f", str(path)]

    def check(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, "-c", "-f", str(self.CONFIG)], capture_output=True, text=True
        )
