"""What every Redis store shares: its errors, its commands, its lifecycle.

A store is given the node's :class:`~hub.cluster.redis_connection.RedisConnection`
and sends its commands through that connection's client; it never closes it.
Commands are never retried and every failure is reported as
:class:`~hub.errors.BackplaneUnavailable` (:func:`unavailable`), so a caller
knows that a command either ran once or failed visibly (:func:`as_unavailable`).
:func:`run_calls` runs many commands and script calls pipelined, loading a
script again after ``NOSCRIPT`` (a script that did not run cannot run twice).
:class:`RedisStore` is the common base of the stores that are only clients
(everything but the backplane, which also runs pub/sub connections).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Self

from redis.exceptions import NoScriptError, RedisClusterException, RedisError

from hub.cluster.redis_connection import RedisConnection
from hub.errors import BackplaneUnavailable

#: Errors that mean "Redis could not do it": every one becomes BackplaneUnavailable.
#: redis-py's ``RedisClusterException`` (no reachable node, slots not all
#: covered) is not a ``RedisError``.
REDIS_ERRORS = (RedisError, RedisClusterException, OSError)


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


def tagged(prefix: str, clustered: bool) -> str:
    """The prefix of keys that must share one hash slot: ``{prefix}`` on a
    cluster (a hash tag), the prefix itself on one Redis."""
    return f"{{{prefix}}}" if clustered else prefix


#: One call of :func:`run_calls`: ``(script, keys, args)`` for a registered
#: script (EVALSHA), or ``(None, command, args)`` for a plain command.
Call = tuple[Any, Any, Sequence[Any]]


async def run_calls(client: Any, calls: Sequence[Call]) -> list[Any]:
    """Send ``calls`` in one pipeline (on a cluster: one per master, in
    parallel — so nothing is ordered across slots); each result, or the
    exception of that call (a connection failure: every one).

    A ``NOSCRIPT`` reply means that call did not run, so after loading its
    script it is sent again — the only case where anything is sent twice.
    """
    results: list[Any] = [None] * len(calls)
    todo = list(range(len(calls)))
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for i in todo:
            script, head, args = calls[i]
            if script is None:
                pipe.execute_command(head, *args)
            else:
                pipe.execute_command("EVALSHA", script.sha, len(head), *head, *args)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except REDIS_ERRORS as exc:
            for i in todo:
                results[i] = exc
            return results
        missing = []
        for i, reply in zip(todo, replies, strict=True):
            if isinstance(reply, NoScriptError) and attempt == 0:
                missing.append(i)
            else:
                results[i] = reply
        if not missing:
            break
        try:
            for script in {id(calls[i][0]): calls[i][0] for i in missing}.values():
                await client.script_load(script.script)
        except REDIS_ERRORS as exc:
            for i in missing:
                results[i] = exc
            break
        todo = missing
    return results


async def run_all(client: Any, what: str, calls: Sequence[Call], batch: int = 500) -> list[Any]:
    """:func:`run_calls`, ``batch`` calls per pipeline; the first failure is
    raised as :func:`unavailable` (``what`` failed)."""
    out: list[Any] = []
    for i in range(0, len(calls), batch):
        results = await run_calls(client, calls[i : i + batch])
        for result in results:
            if isinstance(result, BaseException):
                raise unavailable(what, result)
        out += results
    return out


async def run_scripts(
    client: Any, script: Any, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]
) -> list[Any]:
    """:func:`run_calls` of one script: EVALSHA ``script`` once per ``(keys, args)``."""
    return await run_calls(client, [(script, keys, args) for keys, args in calls])


class RedisStore:
    """A store's view of the node's Redis: a closed check, commands whose
    failures are :class:`~hub.errors.BackplaneUnavailable`, an idempotent close
    (which stops the store, not the connection it was given)."""

    def __init__(self, redis: RedisConnection, *, prefix: str = "agora"):
        self._redis = redis
        self._prefix = prefix
        self._client: Any = redis.client
        self._closed = False

    def _closed_error(self, what: str) -> BackplaneUnavailable:
        return unavailable(what, RuntimeError("store is closed"))

    def _check_open(self, what: str) -> None:
        if self._closed or self._redis.closed:
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
        """Stop using the connection (its owner closes it). Idempotent."""
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
