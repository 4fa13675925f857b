"""``--workers`` metrics (hub/process/worker_metrics.py): two workers' views in
this process over one private directory, as the parent makes it. A scrape
shows a sibling's figures current (asked at scrape time), or its last
snapshot with its true age — never old figures as if current."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
from prometheus_client.core import GaugeMetricFamily, Metric

from hub.process import worker_metrics
from hub.process.worker_metrics import SNAPSHOT_INTERVAL, WorkerMetrics, WorkerSlot


class Figures:
    """A worker's own metrics: one gauge the test sets."""

    def __init__(self) -> None:
        self.connections = 0

    def __call__(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("agora_hub_connections", "Open connections.", self.connections)


def by_worker(view: WorkerMetrics, name: str) -> dict[str, float]:
    return {
        s.labels["worker"]: s.value
        for family in view.collect()
        for s in family.samples
        if s.name == name
    }


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[WorkerMetrics, WorkerMetrics, list[Figures]]]:
    """Worker 0 (answers the scrapes here) and worker 1, both running."""
    figures = [Figures(), Figures()]
    views = [WorkerMetrics(WorkerSlot(i, 2, tmp_path), figures[i], f"node-w{i}") for i in range(2)]
    log = structlog.get_logger("test")
    tasks = [asyncio.get_running_loop().create_task(v.run(log)) for v in views]
    for i in range(2):
        path = views[i].slot.socket_path(i)
        assert path is not None
        async with asyncio.timeout(5):
            while not path.exists():  # noqa: ASYNC110 — the task binds it at its start
                await asyncio.sleep(0.01)
    yield views[0], views[1], figures
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_scrape_shows_a_siblings_figures_as_they_are_now(pair: Any) -> None:
    """The defect: the sibling's snapshot of a second ago was shown as current."""
    scraper, _, figures = pair
    figures[0].connections, figures[1].connections = 4, 0
    await scraper.refresh()
    assert by_worker(scraper, "agora_hub_connections") == {"0": 4, "1": 0}
    figures[1].connections = 2  # agents connect to the sibling: no snapshot since
    await scraper.refresh()
    assert by_worker(scraper, "agora_hub_connections") == {"0": 4, "1": 2}
    ages = by_worker(scraper, "agora_hub_worker_snapshot_age_seconds")
    assert ages["0"] == 0 and ages["1"] < SNAPSHOT_INTERVAL


async def test_a_sibling_that_does_not_answer_is_shown_with_its_true_age(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its loop stalled: listening, never answering. Its last snapshot (five
    seconds old) is shown, and the age gauge says five seconds."""
    monkeypatch.setattr(worker_metrics, "ASK_TIMEOUT", 0.2)
    slot = WorkerSlot(0, 2, tmp_path)
    stalled = asyncio.Event()

    async def never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await stalled.wait()
        writer.close()

    server = await asyncio.start_unix_server(never, slot.socket_path(1))
    written = time.time() - 5
    doc = {"node": "node-w1", "pid": 1, "written": written,
           "families": [["agora_hub_connections", "gauge", "Open connections.",
                         [["agora_hub_connections", {}, 3]]]]}  # fmt: skip
    snapshot = slot.snapshot_path(1)
    assert snapshot is not None
    snapshot.write_bytes(orjson.dumps(doc))
    scraper = WorkerMetrics(slot, Figures(), "node-w0")
    try:
        async with asyncio.timeout(2):
            await scraper.refresh()
    finally:
        stalled.set()
        server.close()
    assert by_worker(scraper, "agora_hub_connections") == {"0": 0, "1": 3}
    age = by_worker(scraper, "agora_hub_worker_snapshot_age_seconds")["1"]
    assert age >= 5, "old figures are never presented as current"


async def test_a_sibling_with_neither_socket_nor_snapshot_is_left_out(tmp_path: Path) -> None:
    scraper = WorkerMetrics(WorkerSlot(0, 2, tmp_path), Figures(), "node-w0")
    await scraper.refresh()
    assert set(by_worker(scraper, "agora_hub_connections")) == {"0"}


def test_a_snapshot_being_rewritten_is_never_read_torn(tmp_path: Path) -> None:
    """The other suspect, ruled out: a reader racing the writer always gets a
    whole document (written aside, then renamed)."""
    figures = Figures()
    writer = WorkerMetrics(WorkerSlot(1, 2, tmp_path), figures, "node-w1")
    reader = WorkerMetrics(WorkerSlot(0, 2, tmp_path), Figures(), "node-w0")
    writer.write_snapshot()
    stop = threading.Event()

    def rewrite() -> None:
        while not stop.is_set():
            figures.connections += 1
            writer.write_snapshot()

    thread = threading.Thread(target=rewrite)
    thread.start()
    try:
        reads = [reader._read(1) for _ in range(2000)]
    finally:
        stop.set()
        thread.join()
    assert all(doc is not None and doc["pid"] == os.getpid() for doc in reads)
    assert [p.name for p in tmp_path.iterdir()] == ["worker-1.json"], "nothing left aside"
