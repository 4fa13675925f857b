"""The identity provider's signing keys, from its JWKS document (``jwt_jwks_url``).

The document is fetched with a timeout and cached. A token whose ``kid`` is
not in the cache triggers a refresh (that is how a key rotation arrives), but
at most one fetch runs at a time and attempts are at least
``min_refresh_interval`` apart, so tokens with made-up kids cannot make the
hub hammer the provider. Keys older than ``max_age`` are refreshed in the
background, so a key the provider withdrew stops working. When the provider
is unreachable or answers garbage, the keys already known stay in use.

Only signature keys of asymmetric types are taken: ``use: enc`` and symmetric
(``kty: oct``) entries are skipped, as are keys whose ``alg`` does not fit
their type; each key verifies only its own algorithm.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import jwt
import orjson
import structlog

from hub.auth.jwt_auth import VerificationKey, algorithms_for
from hub.errors import AuthError, HubError
from hub.net.bodies import read_at_most

MAX_JWKS_BYTES = 1_048_576

_log = structlog.get_logger("hub.auth")


class _Unusable(HubError):
    """The JWKS document could not be fetched or holds no usable key."""


def parse_jwks(document: bytes) -> list[tuple[str | None, VerificationKey]]:
    """The usable signing keys of a JWKS document, as ``(kid, key)`` pairs."""
    try:
        data = orjson.loads(document)
    except orjson.JSONDecodeError:
        raise _Unusable("the document is not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise _Unusable('the document has no "keys" array')
    keys: list[tuple[str | None, VerificationKey]] = []
    for entry in data["keys"]:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        kid = entry.get("kid")
        if entry.get("kty") == "oct" or not (kid is None or isinstance(kid, str)):
            continue
        try:
            jwk = jwt.PyJWK(entry)
            allowed = algorithms_for(jwk.key)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            continue
        if jwk.algorithm_name in allowed:
            keys.append((kid, VerificationKey(jwk.key, (jwk.algorithm_name,))))
    if not keys:
        raise _Unusable("the document holds no usable signing key")
    return keys


class JwksKeys:
    """A :class:`~hub.auth.jwt_auth.KeySource` backed by a JWKS URL."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        min_refresh_interval: float = 30.0,
        retry_interval: float = 5.0,
        max_age: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.url = url
        self._timeout = timeout
        self._min_refresh_interval = min_refresh_interval
        # While no key at all is known every handshake fails, so retry sooner.
        self._retry_interval = min(retry_interval, min_refresh_interval)
        self._max_age = max_age
        self._clock = clock
        self._keys: list[tuple[str | None, VerificationKey]] = []
        self._by_kid: dict[str, VerificationKey] = {}
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._inflight: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    @property
    def kids(self) -> list[str | None]:
        """Key ids currently cached (for logs and tests)."""
        return [kid for kid, _ in self._keys]

    async def resolve(self, header: Mapping[str, Any]) -> VerificationKey:
        kid = header.get("kid")
        key = self._lookup(kid)
        if key is None:
            if self._inflight is not None or self._may_fetch():
                await asyncio.shield(self._start_refresh())
            key = self._lookup(kid)
            if key is None:
                if not self._keys:
                    raise AuthError("the identity provider's keys are unavailable")
                raise AuthError("token signed by an unknown key")
        elif self._stale() and self._may_fetch():
            self._start_refresh()  # in the background: the cached key serves meanwhile
        return key

    async def refresh(self) -> bool:
        """Fetch now (e.g. at start); True if the keys were replaced."""
        before = self._fetched_at
        await asyncio.shield(self._start_refresh())
        return self._fetched_at != before

    async def aclose(self) -> None:
        self._closed = True
        task, self._inflight = self._inflight, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _lookup(self, kid: object) -> VerificationKey | None:
        if isinstance(kid, str):
            return self._by_kid.get(kid)
        # A token without kid is accepted only when the choice is unambiguous.
        return self._keys[0][1] if kid is None and len(self._keys) == 1 else None

    def _may_fetch(self) -> bool:
        if self._closed:
            return False
        if self._attempted_at is None:
            return True
        interval = self._min_refresh_interval if self._keys else self._retry_interval
        return self._clock() - self._attempted_at >= interval

    def _stale(self) -> bool:
        return self._fetched_at is not None and self._clock() - self._fetched_at >= self._max_age

    def _start_refresh(self) -> asyncio.Task[None]:
        if self._inflight is None:
            self._attempted_at = self._clock()
            self._inflight = asyncio.get_running_loop().create_task(self._fetch())
            self._inflight.add_done_callback(self._fetch_done)
        return self._inflight

    def _fetch_done(self, task: asyncio.Task[None]) -> None:
        if self._inflight is task:
            self._inflight = None

    async def _fetch(self) -> None:
        try:
            keys = parse_jwks(await self._download())
        except Exception as exc:
            # _Unusable or anything unforeseen: either way the known keys stay.
            error = str(exc) if isinstance(exc, _Unusable) else f"{type(exc).__name__}: {exc}"
            _log.warning("jwks fetch failed", url=self.url, error=error, keys_kept=len(self._keys))
            return
        self._keys = keys
        self._by_kid = {}
        for kid, key in keys:
            if kid is not None:
                self._by_kid.setdefault(kid, key)
        self._fetched_at = self._clock()
        _log.info("jwks keys loaded", url=self.url, kids=self.kids)

    async def _download(self) -> bytes:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout)
            )
        try:
            async with self._session.get(self.url, headers={"Accept": "application/json"}) as resp:
                if resp.status != 200:
                    raise _Unusable(f"HTTP status {resp.status}")
                body = await read_at_most(resp.content, MAX_JWKS_BYTES, resp.content_length)
            if body is None:
                raise _Unusable(f"the document is larger than {MAX_JWKS_BYTES} bytes")
        except TimeoutError:
            raise _Unusable(f"no answer within {self._timeout} s") from None
        except aiohttp.ClientError as exc:
            raise _Unusable(f"{type(exc).__name__}: {exc}") from None
        return body
