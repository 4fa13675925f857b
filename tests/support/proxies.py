"""Real load balancers (nginx, haproxy) running the project's deploy configs.

The configs under ``deploy/`` are used as they are, except for the listen
port and the upstream node ports, which a test rewrites to free ports.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.servers import ROOT, free_port


def find_binary(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/local/sbin/{name}") if Path(p).exists()), None
    )


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
    raise TimeoutError("proxy did not start listening")


class Proxy:
    kind = ""

    def __init__(self, binary: str, node_ports: list[int]):
        self.binary = binary
        self.node_ports = node_ports
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"agora-{self.kind}-"))
        self.log = self.dir / "proxy.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def _servers(self, text: str, pattern: str) -> str:
        ports = iter(self.node_ports)
        lines = []
        for line in text.splitlines():
            if re.search(pattern, line):
                port = next(ports, None)
                if port is None:
                    continue  # fewer nodes in the test than in the example
                line = re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", line)
            lines.append(line)
        return "\n".join(lines) + "\n"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Nginx(Proxy):
    kind = "nginx"
    CONFIG = ROOT / "deploy" / "nginx" / "agora-hub.conf"

    def start(self) -> Nginx:
        site = self._servers(self.CONFIG.read_text(), r"^\s*server 127\.0\.0\.1:\d+")
        site = re.sub(r"listen 80;", f"listen 127.0.0.1:{self.port};", site)
        (self.dir / "agora-hub.conf").write_text(site)
        (self.dir / "nginx.conf").write_text(
            f"""
daemon off;
worker_processes 1;
pid {self.dir}/nginx.pid;
error_log {self.dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {self.dir}/body;
    proxy_temp_path {self.dir}/proxy;
    fastcgi_temp_path {self.dir}/fastcgi;
    uwsgi_temp_path {self.dir}/uwsgi;
    scgi_temp_path {self.dir}/scgi;
    include {self.dir}/agora-hub.conf;
}}
"""
        )
        self.proc = subprocess.Popen(
            [self.binary, "-p", str(self.dir), "-c", str(self.dir / "nginx.conf")],
            stdout=open(self.log, "wb"),
            stderr=subprocess.STDOUT,
        )
        _wait_port(self.port, self.proc, 10, self.log)
        return self


class HAProxy(Proxy):
    kind = "haproxy"
    CONFIG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"

    def start(self) -> HAProxy:
        cfg = self._servers(self.CONFIG.read_text(), r"^\s*server node\d+ 127\.0\.0\.1:\d+")
        cfg = re.sub(r"bind 127\.0\.0\.1:\d+", f"bind 127.0.0.1:{self.port}", cfg)
        # The production maxconn needs a raised file limit (LimitNOFILE); a test
        # machine's limit may be lower, and a test needs a few dozen connections.
        cfg = re.sub(r"^(\s*)maxconn \d+", r"\g<1>maxconn 4096", cfg, flags=re.M)
        path = self.dir / "haproxy.cfg"
        path.write_text(cfg)
        self.proc = subprocess.Popen(
            [self.binary, "-db", "-f", str(path)],
            stdout=open(self.log, "wb"),
            stderr=subprocess.STDOUT,
        )
        _wait_port(self.port, self.proc, 10, self.log)
        return self

    def check(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, "-c", "-f", str(self.CONFIG)], capture_output=True, text=True
        )
