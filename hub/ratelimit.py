"""Per-connection token bucket with an abuse score.

Each message takes a token; tokens refill at ``rate`` per second up to
``burst``. A message without a token is refused (``RATE_LIMITED``) and adds
one point to an abuse score that drains at ``rate`` points per second. When
the score passes ``rate × abuse_seconds`` the connection is closed (4429).

So a client at twice the rate is throttled forever but never closed; at three
times the rate it is closed after about ``abuse_seconds``; a single burst is
closed only if it overshoots by ``abuse_seconds`` worth of messages.
"""

from __future__ import annotations

from enum import Enum


class Verdict(Enum):
    ALLOW = 0
    LIMIT = 1
    ABUSE = 2


class TokenBucket:
    __slots__ = ("_abuse", "_abuse_limit", "_burst", "_rate", "_stamp", "_tokens")

    def __init__(self, rate: float, burst: float, abuse_seconds: float, now: float):
        self._rate = rate
        self._burst = burst
        self._tokens = burst
        self._stamp = now
        self._abuse = 0.0
        self._abuse_limit = max(rate * abuse_seconds, 1.0)

    def take(self, now: float) -> Verdict:
        elapsed = now - self._stamp
        if elapsed > 0:
            self._stamp = now
            refill = elapsed * self._rate
            self._tokens = min(self._burst, self._tokens + refill)
            if self._abuse:
                self._abuse = max(0.0, self._abuse - refill)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return Verdict.ALLOW
        self._abuse += 1.0
        return Verdict.ABUSE if self._abuse > self._abuse_limit else Verdict.LIMIT
