"""Server processes for the benchmark, CPU pinning and /proc readings.

Every process is started in its own session (process group) and recorded in
:data:`CHILDREN`; :func:`stop_all` ends each of them by its group id — on
success, failure, Ctrl-C or SIGTERM alike — so no hub, worker or
redis-server outlives the run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
TASKSET = shutil.which("taskset")

CHILDREN: list[ServerProcess] = []


class StartFailed(Exception):
    """A server did not come up; the message says why (with its log's tail)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ── cores ───────────────────────────────────────────────────────────────────


class Pinning:
    """Which cores the servers and the load generator run on."""

    def __init__(self) -> None:
        try:
            cores = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = list(range(os.cpu_count() or 1))
        self.cores = cores
        self.enabled = len(cores) >= 2
        self.server_cores = [cores[0]] if self.enabled else cores
        self.client_cores = cores[1:] if self.enabled else cores
        self.all_cores = cores
        if not TASKSET:
            self.method = "sched_setaffinity (taskset not found)"
        else:
            self.method = "taskset"
        if not self.enabled:
            self.method = "none (fewer than 2 cores: server and load share a core)"

    def pin_self(self, cores: list[int]) -> None:
        """Pin the load generator (this process)."""
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(0, set(cores))

    def wrap(self, argv: list[str], cores: list[int]) -> tuple[list[str], list[int] | None]:
        """``argv`` run on ``cores``: via taskset, or a preexec affinity call."""
        if not self.enabled or cores == self.all_cores:
            return argv, None
        if TASKSET:
            return [TASKSET, "-c", ",".join(map(str, cores)), *argv], None
        return argv, cores

    def describe(self) -> dict[str, object]:
        return {
            "method": self.method,
            "cores": self.cores,
            "server_cores": self.server_cores,
            "client_cores": self.client_cores,
        }


# ── /proc ───────────────────────────────────────────────────────────────────


def cpu_times(pid: int) -> tuple[float, float]:
    """(utime, stime) of ``pid`` in seconds (from /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds."""
    return sum(cpu_times(pid))


def machine_cpu() -> tuple[float, float]:
    """(busy, softirq) CPU seconds of the whole machine so far (from /proc/stat)."""
    with open("/proc/stat", "rb") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal …
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / CLK_TCK, fields[6] / CLK_TCK


def rss_bytes(pid: int) -> int:
    """VmRSS of ``pid`` (from /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (a hub's workers)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, ()))
    return out


# ── processes ───────────────────────────────────────────────────────────────


class ServerProcess:
    """A server started by the benchmark, in its own process group."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        cores: list[int] | None,
        pinning: Pinning,
        env: dict[str, str] | None = None,
    ):
        self.name = name
        self._env = env or {}
        self.argv, self._affinity = pinning.wrap(argv, cores or pinning.all_cores)
        self.cores = cores
        self.workdir: str | None = None  # removed on stop (redis-server's --dir)
        self.proc: subprocess.Popen[bytes] | None = None
        fd, path = tempfile.mkstemp(prefix=f"agora-bench-{name}-", suffix=".log")
        os.close(fd)
        self.log_path = Path(path)

    def start(self) -> ServerProcess:
        affinity = self._affinity

        def preexec() -> None:
            if affinity is not None:
                os.sched_setaffinity(0, set(affinity))

        env = {k: v for k, v in os.environ.items() if not k.startswith("AGORA_HUB_")}
        env.update(self._env)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=preexec if affinity is not None else None,
            )
        CHILDREN.append(self)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def pids(self) -> list[int]:
        """This process and its children (workers)."""
        return descendants(self.pid)

    def cpu_split(self) -> tuple[float, float]:
        """(user, system) CPU seconds of this process and its children."""
        user = system = 0.0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                u, s = cpu_times(pid)
                user += u
                system += s
        return user, system

    def cpu(self) -> float:
        return sum(self.cpu_split())

    def rss(self) -> int:
        total = 0
        for pid in self.pids():
            with contextlib.suppress(OSError, RuntimeError):
                total += rss_bytes(pid)
        return total

    def sockets(self) -> dict[int, int]:
        """Open sockets per process of this server (how workers share connections)."""
        out = {}
        for pid in self.pids():
            n = 0
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with contextlib.suppress(OSError):
                        if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                            n += 1
            out[pid] = n
        return out

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 12) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM to the process group, SIGKILL after ``timeout``."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        # The group may still hold workers even when the leader is gone.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        if self in CHILDREN:
            CHILDREN.remove(self)
        with contextlib.suppress(OSError):
            self.log_path.unlink()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def stop_all() -> None:
    for child in list(CHILDREN):
        with contextlib.suppress(Exception):
            child.stop(timeout=2.0)


def wait_tcp(port: int, proc: ServerProcess, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise StartFailed(f"{proc.name} exited early:\n{proc.log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise StartFailed(f"{proc.name} did not listen on {port}:\n{proc.log_tail()}")


def wait_ready(port: int, proc: ServerProcess, timeout: float = 20.0, streak: int = 1) -> None:
    """Poll ``/readyz`` until ``streak`` answers in a row are 200."""
    deadline = time.monotonic() + timeout
    ok = 0
    last = "no answer"
    while time.monotonic() < deadline:
        if not proc.alive():
            raise StartFailed(f"{proc.name} exited early:\n{proc.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1.0) as r:
                if r.status == 200:
                    ok += 1
                    if ok >= streak:
                        return
                    continue
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except OSError as exc:
            last = str(exc)
        ok = 0
        time.sleep(0.1)
    raise StartFailed(f"{proc.name} not ready after {timeout:.0f} s ({last}):\n{proc.log_tail()}")


def listeners(port: int) -> int:
    """Sockets listening on ``port`` (one per worker with SO_REUSEPORT)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                n += 1
    return n


def wait_listeners(port: int, n: int, proc: ServerProcess, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise StartFailed(f"{proc.name} exited early:\n{proc.log_tail()}")
        if listeners(port) >= n:
            return
        time.sleep(0.05)
    raise StartFailed(
        f"{proc.name}: {listeners(port)} of {n} workers listening:\n{proc.log_tail()}"
    )


# ── the three kinds of server ───────────────────────────────────────────────


def hub_argv(port: int, compression: str, extra: list[str] | None = None) -> list[str]:
    hub = ROOT / ".venv" / "bin" / "agora-hub"
    exe = [str(hub)] if hub.exists() else [sys.executable, "-m", "hub"]
    return [
        *exe,
        "serve",
        "--port",
        str(port),
        # The HTTP port (bridges, health) is not measured: any free one.
        "--http-port",
        str(free_port()),
        # Default settings, except the rate limits a benchmark publisher
        # legitimately exceeds (its thousands of publishes, and hundreds of
        # thousands of stream deltas, per second).
        "--rate-limit",
        "1000000",
        "--rate-burst",
        "1000000",
        "--stream-rate-limit",
        "1000000",
        "--stream-rate-burst",
        "1000000",
        # The default level (info: a line per connection opened and
        # closed), as JSON lines, which is what a non-tty stderr gets anyway.
        "--log-format",
        "json",
        "--compression",
        compression,
        *(extra or []),
    ]


def start_hub(
    pinning: Pinning,
    compression: str,
    *,
    cores: list[int] | None = None,
    extra: list[str] | None = None,
    name: str = "hub",
    ready_streak: int = 1,
    source: Path | None = None,
) -> tuple[ServerProcess, int]:
    """A hub process; ``source``: run the hub code of that source tree (an
    export of another commit) instead of this checkout's, for A/B runs."""
    port = free_port()
    env = {"PYTHONPATH": str(source)} if source is not None else None
    proc = ServerProcess(name, hub_argv(port, compression, extra), cores, pinning, env).start()
    try:
        wait_ready(port, proc, streak=ready_streak)
    except BaseException:
        proc.stop(timeout=1.0)
        raise
    return proc, port


def start_baseline(
    pinning: Pinning, compression: str, cores: list[int] | None = None
) -> tuple[ServerProcess, int]:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "tests.benchmarks.baseline_server",
        "--port",
        str(port),
        "--compression",
        compression,
    ]
    proc = ServerProcess("baseline", argv, cores, pinning).start()
    try:
        wait_tcp(port, proc)
    except BaseException:
        proc.stop(timeout=1.0)
        raise
    return proc, port


def redis_binary() -> str | None:
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )


def start_redis(pinning: Pinning, cores: list[int] | None = None) -> tuple[ServerProcess, str]:
    binary = redis_binary()
    if binary is None:
        raise StartFailed("redis-server not found (apt-get install redis-server)")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="agora-bench-redis-")
    argv = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        workdir,
        "--protected-mode",
        "no",
    ]
    proc = ServerProcess("redis", argv, cores, pinning)
    proc.workdir = workdir
    proc.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not proc.alive():
            raise StartFailed(f"redis-server exited early:\n{proc.log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    proc.stop(timeout=1.0)
    raise StartFailed("redis-server did not answer PING")
