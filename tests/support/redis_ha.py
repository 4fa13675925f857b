"""Redis with replicas for tests: a Sentinel setup and a Redis Cluster, real
redis-servers on loopback (free ports, temporary directories, killed at the end).

* :class:`SentinelSetup`: a primary, a replica and three sentinels (quorum 2,
  a master is down after 1 s), named ``mymaster``; ``url`` is its
  ``redis+sentinel://`` form.
* :class:`ClusterSetup`: three masters with a replica each, formed by
  ``redis-cli --cluster create … --cluster-replicas 1``, node timeout 1 s;
  ``url`` is its ``redis+cluster://`` form.

Both can ``kill_master`` (``kill -9``; for a cluster the master of a given
key's slot) and wait for the failover. :func:`direct_client` is a plain
client to the Redis that holds a key (whatever the mode), for tests that look
at keys or flush.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

from redis.asyncio import Redis
from redis.crc import key_slot

from hub.config.redis_url import parse_redis_url
from tests.support.servers import RedisServer, free_port

MASTER = "mymaster"


def _port_pair_free(port: int) -> bool:
    for p in (port, port + 10000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def free_cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        port = random.randrange(20000, 40000)
        if _port_pair_free(port):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _redis_cli(port: int, *args: str, timeout: float = 5.0) -> str:
    out = subprocess.run(
        ["redis-cli", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return out.stdout


def _info(port: int, section: str) -> dict[str, str]:
    try:
        text = _redis_cli(port, "INFO", section, timeout=2.0)
    except subprocess.TimeoutExpired:
        return {}
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {k: v.strip() for k, v in pairs}


def _wait(condition: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not happen within {timeout} s")


class _Server(RedisServer):
    """A redis-server with extra arguments (replica, cluster, sentinel)."""

    def __init__(self, binary: str, port: int, extra: list[str], config: str | None = None):
        super().__init__(binary, port)
        self.extra = extra
        self.config = config

    def start(self, timeout: float = 10.0) -> _Server:
        args = [self.binary]
        if self.config is not None:
            path = Path(self.dir) / "redis.conf"
            path.write_text(self.config)
            args += [str(path)]
        args += [
            "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", self.dir, "--protected-mode", "no",
            # A replica syncs at once (diskless, no batching delay).
            "--repl-diskless-sync-delay", "0",
            *self.extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait(lambda: _redis_cli(self.port, "PING").startswith("PONG"), "redis start", timeout)
        return self

    def remove(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class SentinelSetup:
    """A primary, its replica and three sentinels monitoring them."""

    def __init__(self, binary: str):
        self.binary = binary
        primary_port = free_port()
        self.primary = _Server(binary, primary_port, [])
        self.replica = _Server(binary, free_port(), ["--replicaof", "127.0.0.1", str(primary_port)])
        self.sentinels = [
            _Server(
                binary,
                port,
                ["--sentinel"],
                config=(
                    f"sentinel monitor {MASTER} 127.0.0.1 {primary_port} 2\n"
                    f"sentinel down-after-milliseconds {MASTER} 1000\n"
                    f"sentinel failover-timeout {MASTER} 4000\n"
                    f"sentinel parallel-syncs {MASTER} 1\n"
                ),
            )
            for port in (free_port(), free_port(), free_port())
        ]
        self.url = "redis+sentinel://" + ",".join(
            f"127.0.0.1:{s.port}" for s in self.sentinels
        ) + f"/{MASTER}/0"  # fmt: skip

    def start(self) -> SentinelSetup:
        self.primary.start()
        self.replica.start()
        _wait(
            lambda: _info(self.replica.port, "replication").get("master_link_status") == "up",
            "replication",
        )
        for sentinel in self.sentinels:
            sentinel.start()
        self.wait_settled()
        return self

    def master_port(self) -> int:
        for sentinel in self.sentinels:
            if sentinel.proc is None or sentinel.proc.poll() is not None:
                continue
            out = _redis_cli(sentinel.port, "SENTINEL", "get-master-addr-by-name", MASTER)
            lines = out.split()
            if len(lines) == 2 and lines[1].isdigit():
                return int(lines[1])
        raise RuntimeError("no sentinel names a master")

    def wait_settled(self, timeout: float = 30.0) -> None:
        """Every sentinel knows the others and a replica of the master."""

        def settled() -> bool:
            for sentinel in self.sentinels:
                out = _redis_cli(sentinel.port, "SENTINEL", "master", MASTER)
                fields = out.split("\n")
                info = dict(zip(fields[::2], fields[1::2], strict=False))
                if info.get("num-other-sentinels") != "2" or info.get("num-slaves") != "1":
                    return False
                if "s_down" in info.get("flags", "") or "o_down" in info.get("flags", ""):
                    return False
            return True

        _wait(settled, "sentinels settling", timeout)

    def kill_master(self) -> int:
        """``kill -9`` the current master; returns its port."""
        port = self.master_port()
        victim = self.primary if self.primary.port == port else self.replica
        victim.kill()
        return port

    def wait_failover(self, old_port: int, timeout: float = 30.0) -> int:
        """Wait until every sentinel names a new master that says it is one."""

        def promoted() -> bool:
            ports = set()
            for sentinel in self.sentinels:
                out = _redis_cli(sentinel.port, "SENTINEL", "get-master-addr-by-name", MASTER)
                parts = out.split()
                ports.add(int(parts[1]) if len(parts) == 2 else -1)
            if len(ports) != 1 or old_port in ports or -1 in ports:
                return False
            return _info(ports.pop(), "replication").get("role") == "master"

        _wait(promoted, "sentinel failover", timeout)
        return self.master_port()

    def stop(self) -> None:
        for server in (*self.sentinels, self.replica, self.primary):
            server.remove()


class ClusterSetup:
    """Three masters with a replica each."""

    def __init__(self, binary: str):
        self.binary = binary
        cluster_args = [
            "--cluster-enabled", "yes",
            "--cluster-node-timeout", "1000",
            "--cluster-config-file", "nodes.conf",
            # Slots of a failed master must not stop the others, and a
            # replica takes over whatever its data's age.
            "--cluster-require-full-coverage", "no",
            "--cluster-replica-validity-factor", "0",
        ]  # fmt: skip
        self.servers = [_Server(binary, free_cluster_port(), cluster_args) for _ in range(6)]
        self.url = "redis+cluster://" + ",".join(f"127.0.0.1:{s.port}" for s in self.servers[:3])

    def start(self) -> ClusterSetup:
        for server in self.servers:
            server.start()
        out = subprocess.run(
            [
                "redis-cli", "--cluster", "create",
                *(f"127.0.0.1:{s.port}" for s in self.servers),
                "--cluster-replicas", "1", "--cluster-yes",
            ],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{out.stdout}{out.stderr}")
        self.wait_healthy()
        return self

    def _alive(self) -> list[_Server]:
        return [s for s in self.servers if s.proc is not None and s.proc.poll() is None]

    def masters(self) -> dict[int, _Server]:
        """Live masters by port."""
        return {
            s.port: s for s in self._alive() if _info(s.port, "replication").get("role") == "master"
        }

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Every live node sees the cluster ok, three masters, each with a
        connected replica."""

        def healthy() -> bool:
            for s in self._alive():
                if _info(s.port, "cluster").get("cluster_enabled") != "1":
                    return False
                if "cluster_state:ok" not in _redis_cli(s.port, "CLUSTER", "INFO"):
                    return False
            masters = self.masters()
            if len(masters) != 3:
                return False
            return all("state=online" in _info(p, "replication").get("slave0", "") for p in masters)

        _wait(healthy, "cluster formation", timeout)

    def master_of(self, key: str | bytes) -> int:
        """The port of the master serving ``key``'s slot."""
        slot = key_slot(key.encode() if isinstance(key, str) else key)
        for port in self.masters():
            out = _redis_cli(port, "CLUSTER", "NODES")
            for line in out.splitlines():
                fields = line.split()
                if "myself" not in fields[2] or "master" not in fields[2]:
                    continue
                for span in fields[8:]:
                    lo, _, hi = span.partition("-")
                    if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                        return port
        raise RuntimeError(f"no master serves slot {slot}")

    def node_id(self, port: int) -> str:
        return _redis_cli(port, "CLUSTER", "MYID").strip()

    def move_slot(self, key: str | bytes, to_port: int) -> None:
        """Migrate ``key``'s slot, with its keys, to the master on ``to_port``
        (what a resharding does, one slot)."""
        slot = str(key_slot(key.encode() if isinstance(key, str) else key))
        src = self.master_of(key)
        src_id, dst_id = self.node_id(src), self.node_id(to_port)
        _redis_cli(to_port, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        _redis_cli(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        while keys := _redis_cli(src, "CLUSTER", "GETKEYSINSLOT", slot, "100").split():
            _redis_cli(src, "MIGRATE", "127.0.0.1", str(to_port), "", "0", "5000", "KEYS", *keys)
        for port in self.masters():
            _redis_cli(port, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)

    def kill_master(self, key: str | bytes) -> int:
        """``kill -9`` the master of ``key``'s slot; returns its port."""
        port = self.master_of(key)
        next(s for s in self.servers if s.port == port).kill()
        return port

    def wait_failover(self, old_port: int, key: str | bytes, timeout: float = 30.0) -> int:
        """Wait until a replica took over ``key``'s slot and the cluster is ok."""

        def promoted() -> bool:
            try:
                port = self.master_of(key)
            except (RuntimeError, subprocess.TimeoutExpired):
                return False
            if port == old_port:
                return False
            return all(
                "cluster_state:ok" in _redis_cli(s.port, "CLUSTER", "INFO") for s in self._alive()
            )

        _wait(promoted, "cluster failover", timeout)
        return self.master_of(key)

    def stop(self) -> None:
        for server in self.servers:
            server.remove()


async def direct_client(url: str, key: str | bytes | None = None) -> Redis:
    """A plain client to the Redis holding ``key`` (the master for Sentinel;
    the key slot's master, or any master without a key, for a cluster)."""
    target = parse_redis_url(url)
    if target.mode == "single":
        return Redis.from_url(url)
    if target.mode == "sentinel":
        from redis.asyncio.sentinel import Sentinel

        sentinel = Sentinel(target.hosts)
        host, port = await sentinel.discover_master(target.master)
        for s in sentinel.sentinels:
            await s.aclose()
        return Redis(host=host, port=port)
    host, port = target.hosts[0]
    probe = Redis(host=host, port=port)
    try:
        raw = key.encode() if isinstance(key, str) else key
        slot = key_slot(raw) if raw is not None else 0
        for row in await probe.execute_command("CLUSTER", "SLOTS"):
            lo, hi, master = row[0], row[1], row[2]
            if lo <= slot <= hi:
                return Redis(host=master[0].decode(), port=int(master[1]))
    finally:
        await probe.aclose()
    raise RuntimeError("no master for the key")


async def flush_all(url: str) -> None:
    """Every master of the setup loses its data (a Redis restarted empty)."""
    target = parse_redis_url(url)
    if target.mode != "cluster":
        client = await direct_client(url)
        try:
            await client.flushall()
        finally:
            await client.aclose()
        return
    host, port = target.hosts[0]
    probe = Redis(host=host, port=port)
    try:
        rows = await probe.execute_command("CLUSTER", "SLOTS")
    finally:
        await probe.aclose()
    for addr in {(r[2][0].decode(), int(r[2][1])) for r in rows}:
        client = Redis(host=addr[0], port=addr[1])
        try:
            await client.flushall()
        finally:
            await client.aclose()


async def wait_async(condition: object, what: str, timeout: float = 30.0) -> None:
    """:func:`_wait` off the event loop."""
    await asyncio.to_thread(_wait, condition, what, timeout)
