"""The one owner of a node's Redis connections.

The node builds one :class:`RedisConnection` from ``redis_url`` and hands it
to every Redis store (the backplane, presence, the key-value store, the node
stats); the stores send their commands through its one command client and
never close it. It is closed last, by the node. The URL picks the mode
(:mod:`hub.config.redis_url`):

* **single** (``redis://``): one bounded, blocking pool to one Redis.
* **sentinel** (``redis+sentinel://``): the same pool, whose connections ask
  the sentinels for the master's address each time they connect, so after a
  failover new connections reach the promoted replica (redis-py's
  ``SentinelConnectionPool``, made blocking and bounded here).
* **cluster** (``redis+cluster://``): redis-py's ``RedisCluster``, which routes
  each command by its keys' hash slot, follows ``MOVED``/``ASK`` and re-reads
  the slot map after a failover; one bounded set of connections per node.

One command client serves every store: the stores' traffic is short commands
and small pipelines, so separate pools only divided the connections without
isolating anything. What is not a command is a *subscriber*: the backplane's
pub/sub needs connections of its own, without a read timeout, which this
owner makes (:meth:`subscriber` for one Redis; :meth:`shards` for a cluster,
one per master, for sharded pub/sub) and the backplane closes.

Nothing is retried: a command that failed may have run (a retried publish
could run twice), so every failure reaches the caller, who reports
:class:`~hub.errors.BackplaneUnavailable`. ``MOVED``/``ASK`` redirections are
not failures (the command did not run) and are followed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any, Self

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.cluster import PRIMARY
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError

from hub.config.redis_url import Mode, RedisTarget, parse_redis_url

# Connections of the one command client: per Redis (single, sentinel) or per
# cluster node. Publishes use one at a time (pipelined); the rest are bursts
# of joins and claims after a reconnect storm.
MAX_CONNECTIONS = 96


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Sentinel's master-following connections in a bounded pool that makes a
    caller wait (up to the socket timeout) for a free one instead of failing."""


#: Set while a task runs a command or pipeline of :class:`_Cluster` (holding a
#: permit): what it runs inside takes none of its own.
_HOLDING: ContextVar[bool] = ContextVar("agora_cluster_permit", default=False)


class _Cluster(RedisCluster):
    """``RedisCluster`` that reads the slot map before resolving a command,
    and makes a burst wait for free connections instead of failing.

    redis-py 8 resolves a command's routing policy (a server round trip)
    before its lazy first read of the slot map, which then replaces the
    connections those concurrent first commands are using: a burst of first
    commands fails with "connection lost". Reading the map first (the read is
    locked and done once) avoids it; so does every later re-read the client
    decides on after a failure.

    redis-py's cluster client fails a command (``MaxConnectionsError``) when
    its node already has ``max_connections`` connections busy, where the
    one-Redis pool makes it wait: a burst of a few hundred connects (claims,
    joins) was refused UNAVAILABLE. Here at most ``max_connections`` commands
    and pipelines run at once — each holds at most one connection per node —
    and the others wait for a permit, up to the socket timeout."""

    def __init__(self, *, max_connections: int, wait: float, **kwargs: Any):
        super().__init__(max_connections=max_connections, **kwargs)
        self._permits = asyncio.Semaphore(max_connections)
        self._wait = wait

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self.permit():
            if self._initialize:
                await self.initialize()
            return await super().execute_command(*args, **kwargs)

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        if shard_hint:
            return super().pipeline(transaction, shard_hint)  # refused there
        return _Pipeline(self, transaction)

    @contextlib.asynccontextmanager
    async def permit(self) -> AsyncIterator[None]:
        if _HOLDING.get():
            yield
            return
        try:
            async with asyncio.timeout(self._wait):
                await self._permits.acquire()
        except TimeoutError:
            raise RedisConnectionError("no free connection to the cluster in time") from None
        token = _HOLDING.set(True)
        try:
            yield
        finally:
            _HOLDING.reset(token)
            self._permits.release()


class _Pipeline(ClusterPipeline):
    """A cluster pipeline that runs holding one of its client's permits."""

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> Any:
        cluster = self.cluster_client
        assert isinstance(cluster, _Cluster)
        async with cluster.permit():
            return await super().execute(raise_on_error, allow_redirections)


class RedisConnection:
    """A node's Redis: the command client, and subscriber connections on demand."""

    def __init__(
        self,
        url: str,
        *,
        socket_timeout: float = 3.0,
        connect_timeout: float = 2.0,
        max_connections: int = MAX_CONNECTIONS,
    ):
        target = parse_redis_url(url)
        self.target = target
        self.mode: Mode = target.mode
        #: Keys carry hash tags and space traffic uses sharded pub/sub.
        self.clustered = target.mode == "cluster"
        #: Every master replicates to replicas that may be promoted: the
        #: scripts stamp each space's epoch with the master's replication id.
        self.failover = target.mode != "single"
        self.socket_timeout = socket_timeout
        self._sentinel: Sentinel | None = None
        self._closed = False
        common: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": connect_timeout,
            "retry": Retry(NoBackoff(), 0),
            "health_check_interval": 0,
            # RESP2 on every redis-py version: pub/sub replies are plain
            # arrays that the pump reads itself (RESP3 would make them pushes).
            "protocol": 2,
        }
        self.client: Redis | RedisCluster
        if target.mode == "single":
            pool = BlockingConnectionPool.from_url(
                url, max_connections=max_connections, timeout=socket_timeout, **common
            )
            self.client = Redis.from_pool(pool)
        elif target.mode == "sentinel":
            self._sentinel = Sentinel(
                target.hosts,
                sentinel_kwargs={
                    "socket_timeout": socket_timeout,
                    "socket_connect_timeout": connect_timeout,
                    "username": target.sentinel_username,
                    "password": target.sentinel_password,
                    **_tls(target),
                },
            )
            self.client = self._sentinel.master_for(
                target.master,
                connection_pool_class=_BlockingSentinelPool,
                max_connections=max_connections,
                timeout=socket_timeout,
                db=target.db,
                username=target.username,
                password=target.password,
                check_connection=True,
                **_tls(target),
                **common,
            )
        else:
            self.client = _Cluster(
                startup_nodes=[ClusterNode(h, p) for h, p in target.hosts],
                username=target.username,
                password=target.password,
                max_connections=max_connections,
                wait=socket_timeout,
                **_tls(target),
                **common,
            )

    # ── subscribers ─────────────────────────────────────────────────────

    def subscriber(self) -> AbstractConnection:
        """A new connection for pub/sub (not connected; no read timeout).

        Sentinel: it finds the current master when it connects."""
        assert not isinstance(self.client, RedisCluster)
        pool = self.client.connection_pool
        return pool.connection_class(**{**pool.connection_kwargs, "socket_timeout": None})

    async def shards(self) -> tuple[dict[str, AbstractConnection], Callable[[bytes], str]]:
        """Cluster: the slot map read afresh, a new pub/sub connection to each
        master by name, and which master a channel's slot belongs to."""
        assert isinstance(self.client, RedisCluster)
        cluster = self.client
        if cluster._initialize:
            await cluster.initialize()
        else:  # read the slot map afresh: a master may have failed over
            await cluster.nodes_manager.initialize()
        manager = cluster.nodes_manager
        connections = {
            node.name: node.connection_class(**{**node.connection_kwargs, "socket_timeout": None})
            for node in manager.get_nodes_by_server_type(PRIMARY)
        }

        def owner(channel: bytes) -> str:
            return manager.get_node_from_slot(key_slot(channel)).name

        return connections, owner

    # ── lifecycle ───────────────────────────────────────────────────────

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        """Close the command client (and the sentinels' clients). Idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await self.client.aclose()
        if self._sentinel is not None:
            with contextlib.suppress(Exception):
                await self._sentinel.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def open_redis(url: str | None, **options: Any) -> RedisConnection | None:
    """The connection ``redis_url`` names; None when it is unset or ``memory://``."""
    if not url or url.startswith("memory://"):
        return None
    return RedisConnection(url, **options)


def _tls(target: RedisTarget) -> dict[str, Any]:
    if not target.tls:
        return {}
    return {"ssl": True, **target.tls_options}
