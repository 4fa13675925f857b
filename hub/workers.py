"""``agora-hub serve --workers N``: N node processes sharing one port.

Each worker is a full node (its own event loop, connections and Redis
connections) named ``<node_id>-w<i>``, listening with SO_REUSEPORT so the
kernel spreads new connections across them; they coordinate through Redis
like any other nodes of a cluster. The parent only supervises: it forwards
SIGTERM/SIGINT, restarts a worker that dies unexpectedly (with a pause, so a
crash loop does not spin), and exits when all workers have stopped.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from multiprocessing.process import BaseProcess

import structlog

from hub.settings import Settings

RESTART_PAUSE = 1.0


def _worker_main(settings: Settings) -> None:
    from hub.runner import run

    # The parent handles Ctrl-C for the group; a worker stops on SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise SystemExit(run(settings, reuse_port=True))


def run_workers(settings: Settings) -> int:
    from hub.logging import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    log = structlog.get_logger("hub.workers")
    if settings.port == 0:
        log.error("--workers needs a fixed --port (0 would give each worker its own)")
        return 2
    ctx = mp.get_context("spawn")
    stopping = False

    def spawn(index: int) -> BaseProcess:
        worker_settings = settings.model_copy(
            update={"workers": 1, "node_id": f"{settings.node_id}-w{index}"}
        )
        proc = ctx.Process(target=_worker_main, args=(worker_settings,), name=f"worker-{index}")
        proc.start()
        return proc

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for proc in workers:
            if proc.is_alive() and proc.pid is not None:
                proc.terminate()  # SIGTERM: graceful shutdown in the worker

    workers = [spawn(i) for i in range(settings.workers)]
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("workers started", workers=settings.workers, pids=[p.pid for p in workers])
    while True:
        for index, proc in enumerate(workers):
            proc.join(timeout=0.2)
            if proc.is_alive() or stopping:
                continue
            log.warning("worker died; restarting", worker=index, exitcode=proc.exitcode)
            time.sleep(RESTART_PAUSE)
            workers[index] = spawn(index)
        if stopping:
            deadline = time.monotonic() + settings.shutdown_timeout + 5
            for proc in workers:
                proc.join(max(0.0, deadline - time.monotonic()))
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            log.info("workers stopped")
            return 0
