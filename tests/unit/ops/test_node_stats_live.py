"""``GET /api/nodes``: the answering node's own figures are read live, the
others' are their last report (issue 28)."""

from __future__ import annotations

import orjson

from hub.cluster.nodestats import MemoryNodeStats
from hub.config.settings import Settings
from hub.core.counters import Counters
from hub.ops.api.operations import Operations
from hub.ops.api.stats import NodeReadings, NodeStatsReporter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_own_figures_are_live_and_the_others_as_reported():
    clock = Clock()
    counters = Counters()
    connections = [0]
    readings = NodeReadings(lambda: connections[0], lambda: 1, lambda: True, lambda: 0.0,
                            lambda: None)  # fmt: skip
    store = MemoryNodeStats(clock=clock)
    reporter = NodeStatsReporter("n1", "9.9", counters, readings, store, clock=clock)
    await reporter.report()
    await store.put("n0", orjson.dumps({"connections": 7, "spaces": 2}), 10)
    ops = Operations(
        Settings(), "n1", None, None, None, store,  # type: ignore[arg-type]
        disconnect_local=None, disconnect_remote=None,  # type: ignore[arg-type]
        own_figures=reporter.live,
    )  # fmt: skip

    connections[0] = 3  # an agent connected after the last report
    counters.deliveries += 400
    clock.now += 1.0
    nodes = await ops.nodes()
    assert [(n["id"], n["connections"]) for n in nodes] == [("n0", 7), ("n1", 3)]
    own = nodes[1]
    assert own["version"] == "9.9" and own["deliveries_per_s"] == 0.0  # rates: last report's
    assert "space_rates" not in own

    # Reading live changes no rate: the next report covers the whole interval.
    clock.now += 1.0
    await reporter.report()
    (report,) = [orjson.loads(v) for k, v in (await store.read_all()).items() if k == "n1"]
    assert report["deliveries_per_s"] == 200.0 and report["connections"] == 3


async def test_live_figures_before_the_first_report():
    readings = NodeReadings(lambda: 2, lambda: 0, lambda: False, lambda: 0.5, lambda: None)
    reporter = NodeStatsReporter("n1", "9.9", Counters(), readings, MemoryNodeStats())
    live = reporter.live()
    assert live["id"] == "n1" and live["connections"] == 2 and live["backplane_ready"] is False
    assert live["deliveries_per_s"] == 0.0 and live["updated_at"] > 0
