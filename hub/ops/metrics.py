"""The Prometheus exposition of the node's counters (:mod:`hub.core.counters`).

A custom collector reads the hot path's plain counters and the gauges when
``/metrics`` is scraped. Each node has its own registry, so several nodes can
live in one process (the tests do that). With ``--workers`` the registry
serves every worker's series instead (:class:`MetricsRegistry` built with a ``workers_view``,
:mod:`hub.process.worker_metrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from hub.core.counters import Counters

__all__ = [
    "CONTENT_TYPE_LATEST",
    "WORKER_HEADER",
    "Gauges",
    "HubCollector",
    "MetricsRegistry",
    "ViewFactory",
    "WorkersView",
    "render",
]
#: Response header of a scrape in ``--workers`` mode: which worker answered.
WORKER_HEADER = "Agora-Hub-Worker"


@dataclass(frozen=True, slots=True)
class Gauges:
    """Values read from the node at scrape time."""

    connections: Callable[[], int]
    spaces: Callable[[], int]
    streams: Callable[[], int]
    backplane_ready: Callable[[], bool]
    backplane_lag: Callable[[], float]


class HubCollector:
    def __init__(self, counters: Counters, gauges: Gauges, node_id: str):
        self._c = counters
        self._g = gauges
        self._node = node_id

    def collect(self) -> Iterator[Metric]:
        c, g = self._c, self._g
        yield _gauge(
            "agora_hub_connections", "Open agent connections on this node.", g.connections()
        )
        yield _gauge("agora_hub_spaces", "Spaces with members on this node.", g.spaces())
        yield _gauge(
            "agora_hub_streams_open", "Streams being relayed to this node's members.", g.streams()
        )
        yield _gauge(
            "agora_hub_backplane_ready",
            "1 when the backplane is connected and subscribed.",
            int(g.backplane_ready()),
        )
        yield _gauge(
            "agora_hub_backplane_lag_seconds",
            "Publish-to-delivery delay of the last backplane message.",
            g.backplane_lag(),
        )
        yield _counter(
            "agora_hub_connections_opened", "Connections accepted.", c.connections_opened
        )
        yield _counter("agora_hub_messages_in", "Frames received from agents.", c.messages_in)
        yield _counter("agora_hub_messages_out", "Frames written to agents.", c.messages_out)
        yield _counter("agora_hub_deliveries", "Space messages handed to members.", c.deliveries)
        yield _counter("agora_hub_published", "Space messages this node published.", c.published)
        yield _counter(
            "agora_hub_dropped",
            "Frames not delivered because the connection was closing or too slow.",
            c.dropped,
        )
        yield _counter(
            "agora_hub_slow_consumer_closes",
            "Connections closed with 4008.",
            c.slow_consumer_closes,
        )
        yield _counter(
            "agora_hub_backplane_errors", "Requests refused with UNAVAILABLE.", c.backplane_errors
        )
        errors = CounterMetricFamily(
            "agora_hub_errors", "error events sent, by code.", labels=["code"]
        )
        for code, n in sorted(c.errors.items()):
            errors.add_metric([code], n)
        yield errors
        closes = CounterMetricFamily(
            "agora_hub_closes", "Hub-initiated closes, by close code.", labels=["code"]
        )
        for code, n in sorted(c.closes.items()):
            closes.add_metric([str(code)], n)
        yield closes
        latency = HistogramMetricFamily(
            "agora_hub_delivery_latency_seconds",
            "From a publish reaching the backplane to its hand-off to this node's members "
            "(sampled: events whose seq is a multiple of 16).",
        )
        d = c.delivery_latency
        latency.add_metric([], d.buckets(), d.total)
        yield latency
        yield _gauge(
            "agora_hub_http_requests_in_progress",
            "Requests to the HTTP port being read or answered now.",
            c.http.in_progress,
        )
        yield _counter(
            "agora_hub_http_header_timeouts",
            "HTTP connections closed (408) because a request's head did not come in time.",
            c.http.header_timeouts,
        )
        requests = CounterMetricFamily(
            "agora_hub_http_requests",
            "Requests to the HTTP port, by route, method and status.",
            labels=["route", "method", "status"],
        )
        for (route, method, status), n in sorted(c.http.requests.items()):
            requests.add_metric([route, method, status], n)
        yield requests
        durations = HistogramMetricFamily(
            "agora_hub_http_request_duration_seconds",
            "Time to answer a request to the HTTP port, by route.",
            labels=["route"],
        )
        for route, h in sorted(c.http.durations.items()):
            durations.add_metric([route], h.buckets(), h.total)
        yield durations


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


class WorkersView(Protocol):
    """A collector of every worker's series (hub/process/worker_metrics.py)."""

    def collect(self) -> Iterable[Metric]: ...

    async def refresh(self) -> None: ...


#: Builds the ``--workers`` view around this node's own collect function.
ViewFactory = Callable[[Callable[[], Iterable[Metric]]], WorkersView]


class MetricsRegistry(CollectorRegistry):
    """A node's registry: its :class:`HubCollector`, or in ``--workers`` mode a
    view of every worker (which reads this node's collector for its own part).
    Which of the two is decided when the registry is built."""

    def __init__(
        self,
        collector: HubCollector,
        *,
        workers_view: ViewFactory | None = None,
        worker: int | None = None,
    ):
        super().__init__(auto_describe=False)
        self.hub = collector
        #: The worker answering scrapes, in ``--workers`` mode.
        self.worker = worker
        #: Every worker's series, in ``--workers`` mode.
        self.view: WorkersView | None = None
        if workers_view is None:
            self.register(collector)  # type: ignore[arg-type]
        else:
            self.view = workers_view(collector.collect)
            self.register(self.view)  # type: ignore[arg-type]

    @property
    def asks_workers(self) -> bool:
        """A scrape first asks the other workers (:meth:`refresh`)."""
        return self.view is not None

    async def refresh(self) -> None:
        """Before a scrape in ``--workers`` mode: fetch the other workers'
        current figures (hub/process/worker_metrics.py)."""
        if self.view is not None:
            await self.view.refresh()

    def headers(self) -> dict[str, str]:
        """Response headers of a scrape: the answering worker, in ``--workers`` mode."""
        return {} if self.worker is None else {WORKER_HEADER: str(self.worker)}


def build_registry(
    collector: HubCollector, workers_view: ViewFactory | None = None, worker: int | None = None
) -> MetricsRegistry:
    return MetricsRegistry(collector, workers_view=workers_view, worker=worker)


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
