"""Running one node in this process until SIGTERM/SIGINT.

``agora-hub serve`` (one process) and each ``--workers`` child call
:func:`run`: logging, the open-file limit raised to the hard limit
(:mod:`hub.process.os_limits`), uvloop when available, the node and its
server, then a graceful shutdown. SIGHUP reloads the tokens file, the TLS
certificate and the log level (:mod:`hub.process.reload`). It is blocked from
the start until the reload handler is in place, so a SIGHUP that arrives while
the hub is starting is acted on once it has started, never fatal (a blocked
signal stays blocked across the ``--workers`` parent's spawn of its children,
for the same reason).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal

import structlog

from hub import __version__
from hub.config.settings import Settings, check_files, unknown_env_vars
from hub.errors import ConfigError
from hub.process.heap import freeze_heap
from hub.process.os_limits import log_backlog, log_open_files, raise_open_files_limit
from hub.process.worker_metrics import WorkerSlot


def run(settings: Settings, *, reuse_port: bool = False, worker: WorkerSlot | None = None) -> int:
    """Run one node until SIGTERM/SIGINT; returns the exit status.

    ``worker``: this process is one of ``--workers`` (its parent already
    warned about the environment)."""
    from hub.ops.logging import configure_logging, flush_logs

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    check_files(settings)
    configure_logging(settings.log_level, settings.log_format)
    if worker is None:
        warn_about_environment()
    # Before the first socket: every connection is an open file.
    log_open_files(
        raise_open_files_limit(), structlog.get_logger("hub").bind(node=settings.node_id)
    )
    loop_factory = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        pass
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(serve_until_stopped(settings, reuse_port=reuse_port, worker=worker))
    finally:
        flush_logs()  # what waited when the loop stopped


def warn_about_environment() -> None:
    log = structlog.get_logger("hub")
    for warning in unknown_env_vars():
        log.warning(warning)


async def serve_until_stopped(
    settings: Settings, *, reuse_port: bool = False, worker: WorkerSlot | None = None
) -> int:
    from hub.node.node import Node
    from hub.process.reload import reload_hub
    from hub.process.server import HubServer
    from hub.process.worker_metrics import WorkerMetrics

    log = structlog.get_logger("hub")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    from adapters import from_settings

    node = Node(
        settings,
        adapters=from_settings(settings),
        workers_view=None
        if worker is None
        else lambda own: WorkerMetrics(worker, own, settings.node_id),
        worker=None if worker is None else worker.index,
    )
    server = HubServer(node, reuse_port=reuse_port)
    view = node.metrics_registry.view
    try:
        await server.start()
    except OSError as exc:
        await node.aclose()
        raise ConfigError(
            f"cannot listen on {settings.host} port {settings.port} or http_port "
            f"{settings.http_port}: {exc}"
        ) from None
    log_backlog(settings.listen_backlog, log.bind(node=settings.node_id))
    # Everything built so far lives as long as the process: out of the collector's way.
    frozen = freeze_heap()
    log.info("heap frozen", objects=frozen, gc_threshold=gc.get_threshold(), node=settings.node_id)
    log.info(
        "hub started",
        url=server.url,
        http_port=server.http_port,
        node=settings.node_id,
        backplane="redis" if settings.redis_url else "memory",
        pid=os.getpid(),
        version=__version__,
    )
    snapshots = loop.create_task(view.run(log)) if isinstance(view, WorkerMetrics) else None
    loop.add_signal_handler(signal.SIGHUP, reload_hub, server, log.bind(node=settings.node_id))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
    await stop.wait()
    log.info("hub stopping", node=settings.node_id)
    if snapshots is not None:
        snapshots.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await snapshots
    await server.aclose()
    log.info("hub stopped", node=settings.node_id)
    return 0
