"""The baseline: the smallest fan-out server websockets allows.

No protocol: every connection is a subscriber from the moment it is open,
and every message anyone sends is passed to ``websockets.broadcast`` for all
connections (sender included, as the hub echoes to its publisher). The one
frame it sends of its own, ``{"type":"ready"}``, tells a client it is in the
set — the counterpart of the hub's ``agent.registered``. Same event loop
(uvloop) and the same connection options as the hub where they apply, so it
is the ceiling for a Python websockets hub on this machine. It listens with
the hub's default backlog (4096) so storms compare servers, not SYN retries.

Run: ``python -m tests.benchmarks.baseline_server --port P [--compression deflate]``
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from websockets.asyncio.server import ServerConnection, broadcast, serve

READY = b'{"type":"ready"}'


async def main(port: int, compression: str) -> None:
    clients: set[ServerConnection] = set()

    async def handler(ws: ServerConnection) -> None:
        clients.add(ws)
        try:
            await ws.send(READY, text=True)
            async for message in ws:
                broadcast(clients, message)
        finally:
            clients.discard(ws)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with serve(
        handler,
        "127.0.0.1",
        port,
        compression="deflate" if compression == "deflate" else None,
        ping_interval=None,
        ping_timeout=None,
        max_queue=16,
        # The hub's default listen_backlog: with asyncio's 100, a reconnect
        # storm's SYNs overflow and come back after 1, 3, 7 s, which would
        # time the kernel's retries, not the server.
        backlog=4096,
    ):
        await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--compression", choices=("none", "deflate"), default="none")
    args = parser.parse_args()
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main(args.port, args.compression))
