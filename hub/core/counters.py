"""The hot path's counters: plain integers and lock-free histograms.

Bumping a Prometheus client counter takes a lock per increment; the node's
parts bump these instead (one event loop, no lock needed), and the metrics
collector (:mod:`hub.ops.metrics`) reads them when ``/metrics`` is scraped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field

#: Publish-to-delivery latency buckets (seconds).
DELIVERY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: HTTP request duration buckets (seconds): a bridge may wait up to bridge_timeout.
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: HTTP methods with their own label value; any other is "other".
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Histogram:
    """Observations in cumulative buckets, without a lock (one event loop).

    Exposed as a Prometheus histogram (``_bucket{le}``, ``_sum``, ``_count``).
    """

    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.count = 0
        self.total = 0.0

    def observe(self, value: float) -> None:
        value = max(0.0, value)  # clocks of two hosts may disagree a little
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, n in zip((*map(repr, self.bounds), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


@dataclass(slots=True)
class HttpStats:
    """Requests to the HTTP port: how many by route, method and status, and how long."""

    requests: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    durations: dict[str, Histogram] = field(default_factory=dict)

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        method = method if method in _METHODS else "other"
        self.requests[route, method, str(status)] += 1
        histogram = self.durations.get(route)
        if histogram is None:
            histogram = self.durations[route] = Histogram(HTTP_BUCKETS)
        histogram.observe(seconds)


@dataclass(slots=True)
class Counters:
    messages_in: int = 0
    messages_out: int = 0
    deliveries: int = 0
    dropped: int = 0
    slow_consumer_closes: int = 0
    connections_opened: int = 0
    published: int = 0
    backplane_errors: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    closes: Counter[int] = field(default_factory=Counter)
    #: Publish-to-delivery latency, sampled (see Node.deliver).
    delivery_latency: Histogram = field(default_factory=lambda: Histogram(DELIVERY_BUCKETS))
    http: HttpStats = field(default_factory=HttpStats)
