"""What every Redis implementation shares: its pool, its errors, its lifecycle.

The backplane, presence, the key-value store and the node stats each own one
client on their own bounded pool (:func:`redis_client`). Commands are never
retried and every failure is reported as
:class:`~hub.errors.BackplaneUnavailable` (:func:`unavailable`), so a caller
knows that a command either ran once or failed visibly (:func:`as_unavailable`). :class:`RedisStore`
is the common base of the stores that are only clients (everything but the
backplane, which also runs a pub/sub connection).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Self

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from hub.errors import BackplaneUnavailable

# Errors that mean "Redis could not do it": every one becomes BackplaneUnavailable.
REDIS_ERRORS = (RedisError, OSError)


def redis_pool(
    url: str,
    *,
    socket_timeout: float,
    connect_timeout: float,
    max_connections: int,
) -> BlockingConnectionPool:
    """A bounded pool with short timeouts and no automatic retries.

    A retried script could run twice (a publish with two seqs), so a failed
    command is reported, never repeated. Dead pooled connections are replaced
    when they are checked out, so one failure doesn't poison the pool.
    """
    return BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=socket_timeout,
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
        # RESP2 on every redis-py version: pub/sub replies are plain arrays
        # that the pump reads itself (RESP3 would turn them into push frames).
        protocol=2,
    )


def redis_client(
    url: str, *, socket_timeout: float, connect_timeout: float, max_connections: int
) -> Redis:
    """A client owning its own :func:`redis_pool` (closing it closes the pool)."""
    return Redis.from_pool(
        redis_pool(
            url,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
            max_connections=max_connections,
        )
    )


def unavailable(what: str, exc: BaseException) -> BackplaneUnavailable:
    err = BackplaneUnavailable(f"redis unavailable: {what} failed ({exc.__class__.__name__})")
    err.__cause__ = exc
    return err


@contextlib.contextmanager
def as_unavailable(what: str) -> Iterator[None]:
    """A Redis failure inside is raised as :func:`unavailable` (``what`` failed)."""
    try:
        yield
    except REDIS_ERRORS as exc:
        raise unavailable(what, exc) from exc


class RedisStore:
    """A Redis client for one store: a closed check, commands whose failures
    are :class:`~hub.errors.BackplaneUnavailable`, an idempotent close.

    ``pool_size`` is the subclass's default for ``max_connections``.
    """

    pool_size = 8

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "agora",
        socket_timeout: float = 3.0,
        connect_timeout: float = 2.0,
        max_connections: int | None = None,
    ):
        self._prefix = prefix
        self._client = redis_client(
            url,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
            max_connections=self.pool_size if max_connections is None else max_connections,
        )
        self._closed = False

    def _closed_error(self, what: str) -> BackplaneUnavailable:
        return unavailable(what, RuntimeError("store is closed"))

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise self._closed_error(what)

    @contextlib.contextmanager
    def _command(self, what: str) -> Iterator[None]:
        """Refuse when closed; what fails inside is reported as ``what`` failing."""
        self._check_open(what)
        with as_unavailable(what):
            yield

    async def _call(self, what: str, script: Any, keys: list[str], args: list[Any]) -> Any:
        """Run a registered script (EVALSHA, reloaded after NOSCRIPT)."""
        with self._command(what):
            return await script(keys=keys, args=args)

    async def aclose(self) -> None:
        """Close the client and its pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
