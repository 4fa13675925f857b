"""Running one node in this process until SIGTERM/SIGINT.

``agora-hub serve`` (one process) and each ``--workers`` child call
:func:`run`: logging, uvloop when available, the node and its server, then a
graceful shutdown.
"""

from __future__ import annotations

import asyncio
import os
import signal

import structlog

from hub import __version__
from hub.errors import ConfigError
from hub.settings import Settings


def run(settings: Settings, *, reuse_port: bool = False) -> int:
    """Run one node until SIGTERM/SIGINT; returns the exit status."""
    from hub.logging import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    loop_factory = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(serve_until_stopped(settings, reuse_port=reuse_port))


async def serve_until_stopped(settings: Settings, *, reuse_port: bool = False) -> int:
    from hub.node import Node
    from hub.server import HubServer

    log = structlog.get_logger("hub")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    from adapters import from_settings

    node = Node(settings, adapters=from_settings(settings))
    server = HubServer(node, reuse_port=reuse_port)
    try:
        await server.start()
    except OSError as exc:
        await node.aclose()
        raise ConfigError(
            f"cannot listen on {settings.host} port {settings.port} or http_port "
            f"{settings.http_port}: {exc}"
        ) from None
    log.info(
        "hub started",
        url=server.url,
        http_port=server.http_port,
        node=settings.node_id,
        backplane="redis" if settings.redis_url else "memory",
        pid=os.getpid(),
        version=__version__,
    )
    await stop.wait()
    log.info("hub stopping", node=settings.node_id)
    await server.aclose()
    log.info("hub stopped", node=settings.node_id)
    return 0
