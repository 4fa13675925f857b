"""``--workers N``: every scrape shows every worker's metrics, labelled ``worker``.

The workers share their ports, so a scrape reaches whichever worker the kernel
picks. To make any scrape complete, the parent creates a private directory
(``mkdtemp``, removed when it exits) and each worker writes a snapshot of its
own metrics there every :data:`SNAPSHOT_INTERVAL` seconds — one small JSON
file per worker, replaced atomically (written aside, then renamed). The worker
that answers a scrape renders its own metrics live and its siblings' from
their latest snapshots, every series with a ``worker="<index>"`` label, so a
scraper can tell them apart or aggregate (``sum without (worker) (…)``).

Nothing is shared while serving: no locks, no shared memory, nothing on the
hot path (the counters stay plain integers read at snapshot time); a scrape
reads N-1 small files. A sibling's figures are at most one interval old
(``agora_hub_worker_snapshot_age_seconds`` says how old); a worker that died
stops appearing once the parent has removed its file, and its replacement
starts counting from zero (a counter reset, which ``rate()`` handles). The
answering worker is named by the ``agora_hub_metrics_worker`` gauge and the
``Agora-Hub-Worker`` response header.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from prometheus_client.core import GaugeMetricFamily, Metric

SNAPSHOT_INTERVAL = 1.0


@dataclass(frozen=True, slots=True)
class WorkerSlot:
    """Which worker this process is, of how many, and where snapshots go."""

    index: int
    count: int
    directory: Path | None

    def snapshot_path(self, index: int) -> Path | None:
        return None if self.directory is None else self.directory / f"worker-{index}.json"


class WorkerMetrics:
    """A collector: this worker's metrics live, its siblings' from their snapshots."""

    def __init__(self, slot: WorkerSlot, own: Callable[[], Iterable[Metric]], node_id: str):
        self.slot = slot
        self._own = own
        self._node_id = node_id

    # ── this worker's side ──────────────────────────────────────────────

    def snapshot(self) -> bytes:
        families = [
            [m.name, m.type, m.documentation, [[s.name, s.labels, s.value] for s in m.samples]]
            for m in self._own()
        ]
        doc = {"node": self._node_id, "pid": os.getpid(), "written": time.time()}
        return orjson.dumps({**doc, "families": families})

    def write_snapshot(self) -> None:
        path = self.slot.snapshot_path(self.slot.index)
        if path is None:
            return
        aside = path.with_name(f".{path.name}.{os.getpid()}")
        aside.write_bytes(self.snapshot())
        os.replace(aside, path)

    def remove_snapshot(self) -> None:
        path = self.slot.snapshot_path(self.slot.index)
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()

    async def run(self, log: Any) -> None:
        """Write a snapshot every interval until cancelled; the file goes with the task."""
        failed = False
        try:
            while True:
                try:
                    self.write_snapshot()
                    failed = False
                except OSError as exc:
                    if not failed:  # one line per outage, not one per second
                        log.warning("cannot write the worker's metrics snapshot", error=str(exc))
                    failed = True
                await asyncio.sleep(SNAPSHOT_INTERVAL)
        finally:
            self.remove_snapshot()

    # ── the scrape ───────────────────────────────────────────────────────

    def _read(self, index: int) -> dict[str, Any] | None:
        path = self.slot.snapshot_path(index)
        if path is None:
            return None
        try:
            doc = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None  # not written yet, or the worker is being replaced
        return doc if isinstance(doc, dict) else None

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        info = GaugeMetricFamily(
            "agora_hub_worker_info",
            "One series per worker in this scrape: its node id and process id.",
            labels=["worker", "node", "pid"],
        )
        age = GaugeMetricFamily(
            "agora_hub_worker_snapshot_age_seconds",
            "How old each worker's figures in this scrape are (0: the answering worker).",
            labels=["worker"],
        )
        now = time.time()
        for index in range(self.slot.count):
            label = str(index)
            if index == self.slot.index:
                own = [[m.name, m.type, m.documentation, m.samples] for m in self._own()]
                node, pid, written, found = self._node_id, os.getpid(), now, own
            else:
                doc = self._read(index)
                if doc is None:
                    continue
                node, pid, written = doc.get("node"), doc.get("pid"), doc.get("written", now)
                found = doc.get("families", [])
            for name, typ, documentation, samples in found:
                family = families.get(name)
                if family is None:
                    family = families[name] = Metric(name, documentation, typ)
                for sample in samples:
                    sample_name, labels, value = sample[0], sample[1], sample[2]
                    family.add_sample(sample_name, {**labels, "worker": label}, value)
            info.add_metric([label, str(node), str(pid)], 1)
            age.add_metric([label], max(0.0, now - float(written)))
        yield from families.values()
        yield info
        yield age
        yield GaugeMetricFamily(
            "agora_hub_metrics_worker",
            "Index of the worker that answered this scrape.",
            value=self.slot.index,
        )
