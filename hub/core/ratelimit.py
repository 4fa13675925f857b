"""Per-connection token bucket with an abuse score.

Each message takes a token; tokens refill at ``rate`` per second up to
``burst``. A message without a token is refused (``RATE_LIMITED``) and adds
one point to an abuse score that drains at ``rate`` points per second and is
capped at ``rate × abuse_seconds``. An *overshoot* lasts from the first
refusal until the score has drained to zero.

The connection is closed (4429) only when the score is full **and** the
overshoot has lasted ``abuse_seconds`` of wall time: the excess must be
sustained. So a burst, however big, is refused message by message but never
closes (it fills the score at once, and the score drains once it stops); a
client at twice the rate is throttled forever but never closed (its
refusals drain as fast as they come); at three times the rate it is closed
after about ``abuse_seconds``.
"""

from __future__ import annotations

from enum import Enum


class Verdict(Enum):
    ALLOW = 0
    LIMIT = 1
    ABUSE = 2


class TokenBucket:
    __slots__ = (
        "_abuse",
        "_abuse_limit",
        "_abuse_seconds",
        "_burst",
        "_over_since",
        "_rate",
        "_stamp",
        "_tokens",
    )

    def __init__(self, rate: float, burst: float, abuse_seconds: float, now: float):
        self._rate = rate
        self._burst = burst
        self._tokens = burst
        self._stamp = now
        self._abuse = 0.0
        self._abuse_limit = max(rate * abuse_seconds, 1.0)
        self._abuse_seconds = abuse_seconds
        self._over_since = now

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
        if not self._abuse:
            self._over_since = now  # a new overshoot begins
        self._abuse = min(self._abuse + 1.0, self._abuse_limit)
        if self._abuse >= self._abuse_limit and now - self._over_since >= self._abuse_seconds:
            return Verdict.ABUSE
        return Verdict.LIMIT
