"""``agora-hub serve --workers N``: N node processes sharing one port.

Each worker is a full node (its own event loop, connections and Redis
connections) named ``<node_id>-w<i>``, listening with SO_REUSEPORT so the
kernel spreads new connections across them; they coordinate through Redis
like any other nodes of a cluster. The parent only supervises: it forwards
SIGTERM/SIGINT (stop) and SIGHUP (reload, :mod:`hub.process.reload`), restarts a
worker that dies unexpectedly (with a pause, so a crash loop does not spin),
and exits when all workers have stopped. A worker that cannot start because
of its configuration (exit status 2: a port taken, an unusable file) is not
restarted — the parent stops the others and exits 2.

The parent also creates the private directory where each worker answers
for its metrics (a Unix socket) and leaves a snapshot of them, so that any
worker answering a scrape shows all of them, current
(:mod:`hub.process.worker_metrics`); it removes a dead worker's files and, on
exit, the directory.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import time
from multiprocessing.process import BaseProcess
from pathlib import Path

import structlog

from hub.config.settings import Settings, check_files, reread_settings
from hub.errors import ConfigError
from hub.process.worker_metrics import WorkerSlot

RESTART_PAUSE = 1.0
CONFIG_EXIT = 2


def _worker_main(settings: Settings, slot: WorkerSlot) -> None:
    from hub.process.runner import run

    # The parent handles Ctrl-C for the group; a worker stops on SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        status = run(settings, reuse_port=True, worker=slot)
    except ConfigError as exc:
        print(f"agora-hub: worker {slot.index}: {exc}", file=sys.stderr)
        status = CONFIG_EXIT
    raise SystemExit(status)


def run_workers(settings: Settings) -> int:
    from hub.ops.logging import configure_logging, set_log_level
    from hub.process.runner import warn_about_environment

    check_files(settings)
    configure_logging(settings.log_level, settings.log_format)
    log = structlog.get_logger("hub.process.workers")
    if settings.port == 0:
        log.error("--workers needs a fixed --port (0 would give each worker its own)")
        return 2
    warn_about_environment()
    ctx = mp.get_context("spawn")
    stopping = False
    failed = False
    template = settings
    workers: list[BaseProcess] = []
    directory: Path | None = None
    try:
        directory = Path(tempfile.mkdtemp(prefix="agora-hub-workers-"))
    except OSError as exc:
        log.warning(
            "no directory for the workers' metrics: each scrape shows one worker", error=str(exc)
        )

    def spawn(index: int) -> BaseProcess:
        worker_settings = template.model_copy(
            update={"workers": 1, "node_id": f"{settings.node_id}-w{index}"}
        )
        slot = WorkerSlot(index, settings.workers, directory)
        proc = ctx.Process(
            target=_worker_main, args=(worker_settings, slot), name=f"worker-{index}"
        )
        # SIGHUP is blocked while the child starts (the mask survives exec): one
        # that arrives before its handler is in place waits instead of killing it.
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        return proc

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for proc in workers:
            if proc.is_alive() and proc.pid is not None:
                proc.terminate()  # SIGTERM: graceful shutdown in the worker

    def reload(signum: int, _frame: object) -> None:
        nonlocal template
        for proc in workers:
            if proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, signal.SIGHUP)
        # Workers started later (after a crash) get the new log level too; a
        # config file the workers refuse is reported by each of them.
        with contextlib.suppress(ConfigError):
            fresh = reread_settings(template)
            if fresh is not None:
                template = template.model_copy(update={"log_level": fresh.log_level})
                set_log_level(fresh.log_level)
        log.info("reload forwarded to the workers", workers=len(workers))

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, reload)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
    try:
        for i in range(settings.workers):
            workers.append(spawn(i))
        log.info("workers started", workers=settings.workers, pids=[p.pid for p in workers])
        while True:
            for index, proc in enumerate(workers):
                proc.join(timeout=0.2)
                if proc.is_alive() or stopping:
                    continue
                gone = WorkerSlot(index, settings.workers, directory)
                for path in (gone.snapshot_path(index), gone.socket_path(index)):
                    if path is not None:
                        with contextlib.suppress(OSError):
                            path.unlink()
                if proc.exitcode == CONFIG_EXIT:
                    log.error("worker cannot start; stopping", worker=index)
                    failed = True
                    stop(signal.SIGTERM, None)
                    break
                log.warning("worker died; restarting", worker=index, exitcode=proc.exitcode)
                time.sleep(RESTART_PAUSE)
                if stopping:  # a SIGTERM during the pause: nothing is started any more
                    break
                workers[index] = spawn(index)
                if stopping:  # one while it started: it was not among those told
                    workers[index].terminate()
            if stopping:
                deadline = time.monotonic() + settings.shutdown_timeout + 5
                for index, proc in enumerate(workers):
                    proc.join(max(0.0, deadline - time.monotonic()))
                    if proc.is_alive():
                        log.warning("worker did not stop in time; killed", worker=index)
                        proc.kill()
                        proc.join()
                log.info("workers stopped")
                return CONFIG_EXIT if failed else 0
    finally:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
