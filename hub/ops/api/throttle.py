"""Throttling of wrong operator secrets, per client address (docs/api.md).

The API key and the admin token are long random strings, but a face that
answers every guess at once invites scripts to try, and a weak secret would
fall to them. Each face (the server API; the status page's login form and
its ``Authorization: Bearer``) keeps one :class:`FailureThrottle`:

* a wrong secret presented from an address counts against it; the window
  opens with its first wrong secret and lasts :data:`WINDOW_SECONDS`;
* once :data:`MAX_FAILURES` wrong secrets are counted in the window, every
  further attempt from that address is answered ``429`` with
  ``Retry-After`` (the seconds left of the window) until it ends, without
  the secret being looked at — a right one included;
* a right secret does not reset the count (it is not what a guesser needs
  to be told).

The address is the one the hub computes for everything per client
(:meth:`hub.net.proxies.TrustedProxies.client_address`: behind a trusted
balancer, the client it names). An IPv6 client counts as its ``/64``, the
block one host is usually given, so it cannot step past the limit by
changing addresses within it. At most :data:`MAX_ADDRESSES` addresses are
remembered (the one that failed longest ago is forgotten first), so a spray
of addresses cannot grow the state; what is counted is per node, in memory.

The limits are fixed constants, not settings: no operator has a reason to
let more guesses through, and the numbers leave a person who mistypes room.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from aiohttp import web

from hub.net.proxies import TrustedProxies
from hub.ops.api.errors import ApiError
from protocol.errors import ErrorCode

#: Wrong secrets one address may present in one window.
MAX_FAILURES = 10
#: Seconds a window lasts, from the first wrong secret in it.
WINDOW_SECONDS = 60.0
#: Addresses remembered at once (per face, per node).
MAX_ADDRESSES = 10_000


class Throttled(Exception):
    """An address past its limit; ``retry_after`` seconds are left of its window."""

    def __init__(self, retry_after: int):
        super().__init__(f"too many wrong secrets from this address: try again in {retry_after} s")
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}

    def error(self) -> ApiError:
        """The JSON answer: ``429 RATE_LIMITED`` with ``Retry-After``."""
        return ApiError(ErrorCode.RATE_LIMITED, str(self), headers=self.headers())


class FailureThrottle:
    """Wrong secrets per client address, in windows of ``window`` seconds."""

    def __init__(
        self,
        limit: int = MAX_FAILURES,
        window: float = WINDOW_SECONDS,
        capacity: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.limit = limit
        self.window = window
        self.capacity = capacity
        self._clock = clock
        #: key → (start of its window, wrong secrets in it); the least
        #: recently failed first.
        self._failures: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._failures)

    def check(self, address: str) -> None:
        """Raise :class:`Throttled` when ``address`` may not try now."""
        if not self._failures:
            return
        key = _key(address)
        entry = self._failures.get(key)
        if entry is None:
            return
        start, failures = entry
        left = start + self.window - self._clock()
        if left <= 0:
            del self._failures[key]  # its window is over
        elif failures >= self.limit:
            raise Throttled(max(1, math.ceil(left)))

    def failed(self, address: str) -> None:
        """Count a wrong secret from ``address``."""
        now = self._clock()
        key = _key(address)
        start, failures = self._failures.pop(key, (now, 0))
        if now - start >= self.window:
            start, failures = now, 0
        self._failures[key] = (start, failures + 1)
        # Forget what no longer counts, then whatever is over the bound.
        while self._failures:
            first, (first_start, _) = next(iter(self._failures.items()))
            if now - first_start < self.window and len(self._failures) <= self.capacity:
                break
            del self._failures[first]


def client_of(request: web.Request, proxies: TrustedProxies) -> str:
    """The request's client address (behind ``trusted_proxies``: the one they name)."""
    peer: Any = request.transport.get_extra_info("peername") if request.transport else None
    return proxies.client_address(peer, request.headers).ip


def _key(address: str) -> str:
    """What an address counts as: itself, or for IPv6 its ``/64``."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)
