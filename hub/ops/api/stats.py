"""Each node's figures for operators, published every few seconds.

A :class:`NodeStatsReporter` turns the node's counters into rates (deliveries,
messages in, publishes per second, over the last interval), adds what it can
read at once (connections, local spaces, backplane lag and readiness) and
writes the document into the cluster's :class:`~hub.cluster.nodestats.NodeStatsStore`
every :data:`STATS_INTERVAL` seconds, so any node can answer ``GET
/api/nodes`` and the status page for the whole cluster; the node answering
shows its own connections, spaces and backplane state live (:meth:`NodeStatsReporter.live`),
the others' as last reported (at most a few seconds old). It also carries the
node's event rate per space (the busiest :data:`MAX_SPACE_RATES`), counted in
``Node.deliver`` only while the status page is on.

Only a node with the server API or the status page enabled runs one; nothing
of it is on the fan-out path except that per-space count.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import orjson
import structlog

from hub.cluster.nodestats import NodeStatsStore
from hub.core.counters import Counters
from hub.errors import BackplaneUnavailable
from protocol import codec

STATS_INTERVAL = 2.0
#: A document outlives a few missed writes, no more: a dead node drops out soon.
STATS_TTL = 3 * STATS_INTERVAL + 1.0
#: Spaces whose event rate one node reports (its busiest).
MAX_SPACE_RATES = 200


@dataclass(frozen=True, slots=True)
class NodeReadings:
    """What the reporter reads from the node each time."""

    connections: Callable[[], int]
    spaces: Callable[[], int]
    backplane_ready: Callable[[], bool]
    backplane_lag: Callable[[], float]
    #: The per-space event counts since the last call (and a fresh count from now),
    #: or None when the node does not count them.
    take_space_events: Callable[[], dict[str, int] | None]


class NodeStatsReporter:
    def __init__(
        self,
        node_id: str,
        version: str,
        counters: Counters,
        readings: NodeReadings,
        store: NodeStatsStore,
        *,
        interval: float = STATS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.node_id = node_id
        self.version = version
        self.counters = counters
        self.readings = readings
        self.store = store
        self.interval = interval
        self._clock = clock
        self._started_at = codec.now_ms()
        self._last: tuple[float, int, int, int] | None = None
        self._latest: dict[str, Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._failed = False
        self._log = structlog.get_logger("hub").bind(node=node_id)

    def document(self) -> dict[str, Any]:
        """This node's figures now; rates over the time since the last call."""
        c, r = self.counters, self.readings
        now = self._clock()
        current = (now, c.deliveries, c.messages_in, c.published)
        last, self._last = self._last, current
        rates = [0.0, 0.0, 0.0]
        elapsed = now - last[0] if last is not None else 0.0
        if last is not None and elapsed > 0:
            rates = [round((current[i] - last[i]) / elapsed, 2) for i in (1, 2, 3)]
        events = r.take_space_events()
        space_rates: dict[str, float] = {}
        if events and elapsed > 0:
            for space, n in heapq.nlargest(MAX_SPACE_RATES, events.items(), key=itemgetter(1)):
                space_rates[space] = round(n / elapsed, 2)
        return {
            "id": self.node_id,
            "version": self.version,
            **self._instant(),
            "deliveries_per_s": rates[0],
            "messages_in_per_s": rates[1],
            "published_per_s": rates[2],
            "started_at": self._started_at,
            "updated_at": codec.now_ms(),
            "space_rates": space_rates,
        }

    def _instant(self) -> dict[str, Any]:
        """What is read at once, without an interval: the figures ``live`` refreshes."""
        r = self.readings
        return {
            "connections": r.connections(),
            "spaces": r.spaces(),
            "backplane_lag": round(r.backplane_lag(), 6),
            "backplane_ready": r.backplane_ready(),
        }

    def live(self) -> dict[str, Any]:
        """This node's figures for a request it answers itself: connections,
        spaces and the backplane read now; the rates (which need an interval)
        and the per-space rates from its latest report. Changes no state."""
        base = self._latest
        if base is None:
            base = {
                "id": self.node_id, "version": self.version,
                "deliveries_per_s": 0.0, "messages_in_per_s": 0.0, "published_per_s": 0.0,
                "started_at": self._started_at, "space_rates": {},
            }  # fmt: skip
        return {**base, **self._instant(), "updated_at": codec.now_ms()}

    async def report(self) -> None:
        """Write one document now; BackplaneUnavailable propagates."""
        document = self.document()
        self._latest = document
        await self.store.put(self.node_id, orjson.dumps(document), STATS_TTL)

    async def start(self) -> None:
        with contextlib.suppress(BackplaneUnavailable):
            await self.report()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.report()
                self._failed = False
            except BackplaneUnavailable as exc:
                if not self._failed:  # one line per outage
                    self._log.warning("cannot publish node stats", error=str(exc))
                self._failed = True
            except Exception:
                self._log.exception("node stats failed")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):
            await self.store.remove(self.node_id)
        with contextlib.suppress(Exception):
            await self.store.aclose()


def parse_documents(raw: dict[str, bytes]) -> list[dict[str, Any]]:
    """The nodes' documents, decoded and sorted by node id (unreadable ones skipped)."""
    nodes = []
    for node_id in sorted(raw):
        try:
            doc = orjson.loads(raw[node_id])
        except orjson.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            doc["id"] = node_id
            nodes.append(doc)
    return nodes
