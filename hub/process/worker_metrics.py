"""``--workers N``: every scrape shows every worker's current metrics, labelled ``worker``.

The workers share their ports, so a scrape reaches whichever worker the kernel
picks. The parent creates a private directory (``mkdtemp``, removed when it
exits) where each worker listens on a Unix socket (``worker-<i>.sock``) that
answers its current metrics as one small JSON document. The worker that
answers a scrape asks its siblings first (concurrently, waiting at most
:data:`ASK_TIMEOUT`), then renders its own metrics live and theirs from their
answers, every series with a ``worker="<index>"`` label, so a scraper can tell
them apart or aggregate (``sum without (worker) (…)``).

Why asked at scrape time: a sibling's figures used to come only from a
snapshot it wrote every :data:`SNAPSHOT_INTERVAL` — so for up to that long
after agents connected, a scrape answered by another worker showed the old
count (0) as if current, while the age gauge said "less than a second". The
snapshot files were never torn (written aside, then renamed); they were
simply old. Each worker still writes that snapshot every interval: it is
what a scrape shows of a sibling that does not answer in time (its loop
stalled), with ``agora_hub_worker_snapshot_age_seconds`` saying how old it is.
A sibling's figures are thus current (age about 0), or exactly as old as the
gauge says — never older figures presented as current.

Nothing is shared while serving: no locks, no shared memory, nothing on the
hot path (the counters stay plain integers read when asked); a scrape costs
each sibling one render of its own metrics. A worker that died stops
appearing once the parent has removed its file, and its replacement starts
counting from zero (a counter reset, which ``rate()`` handles). The answering
worker is named by the ``agora_hub_metrics_worker`` gauge and the
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
#: How long a scrape waits for a sibling's current figures; a sibling that
#: answers later is shown from its last snapshot (and its age).
ASK_TIMEOUT = SNAPSHOT_INTERVAL


@dataclass(frozen=True, slots=True)
class WorkerSlot:
    """Which worker this process is, of how many, and where snapshots go."""

    index: int
    count: int
    directory: Path | None

    def snapshot_path(self, index: int) -> Path | None:
        return None if self.directory is None else self.directory / f"worker-{index}.json"

    def socket_path(self, index: int) -> Path | None:
        """Where worker ``index`` answers with its current metrics."""
        return None if self.directory is None else self.directory / f"worker-{index}.sock"


class WorkerMetrics:
    """A collector: this worker's metrics live, its siblings' from their snapshots."""

    def __init__(self, slot: WorkerSlot, own: Callable[[], Iterable[Metric]], node_id: str):
        self.slot = slot
        self._own = own
        self._node_id = node_id
        #: The siblings' answers to the latest scrape's question, by index.
        self._answers: dict[int, dict[str, Any]] = {}

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
        """Answer the siblings' questions and write a snapshot every interval
        until cancelled; the socket and the file go with the task."""
        server = await self._listen(log)
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
            if server is not None:
                server.close()
                with contextlib.suppress(OSError):
                    self.slot.socket_path(self.slot.index).unlink()  # type: ignore[union-attr]
            self.remove_snapshot()

    async def _listen(self, log: Any) -> asyncio.AbstractServer | None:
        path = self.slot.socket_path(self.slot.index)
        if path is None:
            return None
        try:
            # A socket left by this index's previous process is replaced.
            return await asyncio.start_unix_server(self._answer, path)
        except OSError as exc:  # e.g. a path longer than a Unix socket's
            log.warning(
                "cannot answer the other workers: they show this one's snapshots",
                error=str(exc),
            )
            return None

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(self.snapshot())
            await writer.drain()
        except OSError:
            pass  # the asking worker gave up
        finally:
            writer.close()

    # ── the scrape ───────────────────────────────────────────────────────

    async def refresh(self) -> None:
        """Before a scrape: ask every sibling for its current metrics."""
        siblings = [i for i in range(self.slot.count) if i != self.slot.index]
        answers = await asyncio.gather(*(self._ask(i) for i in siblings))
        self._answers = {i: doc for i, doc in zip(siblings, answers, strict=True) if doc}

    async def _ask(self, index: int) -> dict[str, Any] | None:
        path = self.slot.socket_path(index)
        if path is None:
            return None
        try:
            async with asyncio.timeout(ASK_TIMEOUT):
                reader, writer = await asyncio.open_unix_connection(path)
                try:
                    data = await reader.read()
                finally:
                    writer.close()
        except (OSError, TimeoutError):
            return None  # not listening (starting, replaced) or not answering in time
        return _document(data)

    def _read(self, index: int) -> dict[str, Any] | None:
        path = self.slot.snapshot_path(index)
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except OSError:
            return None  # not written yet, or the worker is being replaced
        return _document(data)

    def _latest(self, index: int) -> dict[str, Any] | None:
        """A sibling's newest figures: its answer to this scrape, or its snapshot."""
        found = [d for d in (self._answers.get(index), self._read(index)) if d is not None]
        return max(found, key=_written, default=None)

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
                doc = self._latest(index)
                if doc is None:
                    continue
                node, pid, written = doc.get("node"), doc.get("pid"), _written(doc)
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


def _document(data: bytes) -> dict[str, Any] | None:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _written(doc: dict[str, Any]) -> float:
    written = doc.get("written")
    return float(written) if isinstance(written, int | float) else 0.0
