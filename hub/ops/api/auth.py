"""Credentials of the server API and the status page, checked in constant time.

* The **API key** (``api_key``) comes as ``Authorization: apikey KEY`` or
  ``X-API-Key: KEY``.
* The **admin token** (``admin_token``) comes as ``Authorization: Bearer
  TOKEN`` or, for a browser, as a session cookie the login form sets: its
  expiry and an HMAC-SHA256 of it keyed with the token, so any node of the
  cluster (they share the token) accepts it, nothing is stored, and changing
  the token ends every session. The cookie is ``HttpOnly`` (scripts cannot
  read it), ``SameSite=Strict`` (other sites cannot make the browser send it)
  and ``Secure`` when the page came over HTTPS.

Comparisons hash both sides first, so they take the same time whatever the
presented value's length or content.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable

from aiohttp import web

COOKIE = "agora_hub_admin"
#: How long a status-page login lasts.
SESSION_SECONDS = 12 * 3600
_CONTEXT = b"agora-hub admin session\x00"


class Secret:
    """A configured secret that presented values are compared with."""

    def __init__(self, value: str):
        self._digest = hashlib.sha256(value.encode()).digest()
        self._key = value.encode()

    def matches(self, presented: str | None) -> bool:
        if presented is None:
            return False
        digest = hashlib.sha256(presented.encode(errors="surrogateescape")).digest()
        return hmac.compare_digest(digest, self._digest)

    def sign(self, message: bytes) -> str:
        return hmac.new(self._key, _CONTEXT + message, hashlib.sha256).hexdigest()


def api_key_of(request: web.Request) -> str | None:
    """The API key a request presents, if any."""
    header = request.headers.get("Authorization")
    if header is not None:
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() == "apikey" and value.strip():
            return value.strip()
    return request.headers.get("X-API-Key")


def bearer_of(request: web.Request) -> str | None:
    header = request.headers.get("Authorization")
    if header is None:
        return None
    scheme, _, value = header.strip().partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


class AdminSessions:
    """Stateless login sessions for the status page."""

    def __init__(
        self,
        token: Secret,
        lifetime: float = SESSION_SECONDS,
        clock: Callable[[], float] = time.time,
    ):
        self.token = token
        self.lifetime = lifetime
        self._clock = clock

    def issue(self) -> str:
        expires = str(int(self._clock() + self.lifetime))
        return f"{expires}.{self.token.sign(expires.encode())}"

    def valid(self, cookie: str | None) -> bool:
        if not cookie:
            return False
        expires, _, mac = cookie.partition(".")
        if not expires.isdigit() or len(expires) > 12:
            return False
        expected = self.token.sign(expires.encode())
        if not hmac.compare_digest(mac.encode(errors="surrogateescape"), expected.encode()):
            return False
        return int(expires) > self._clock()

    def set_cookie(self, request: web.Request, response: web.StreamResponse) -> None:
        response.set_cookie(
            COOKIE,
            self.issue(),
            max_age=int(self.lifetime),
            path="/admin",
            httponly=True,
            samesite="Strict",
            secure=served_over_https(request),
        )

    @staticmethod
    def clear_cookie(request: web.Request, response: web.StreamResponse) -> None:
        response.del_cookie(
            COOKIE, path="/admin", httponly=True, samesite="Strict",
            secure=served_over_https(request),
        )  # fmt: skip


def served_over_https(request: web.Request) -> bool:
    """HTTPS to the hub itself, or to a proxy in front that says so."""
    return request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"
