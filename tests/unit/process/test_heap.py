"""The node freezes its long-lived objects once started (in a child process:
freezing the test runner's own heap would outlive the test)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from hub.process.heap import GEN0_THRESHOLD, GEN2_THRESHOLD
from tests.support.servers import ROOT


def run(script: str) -> list[str]:
    """The script's last line of output, split (a node's logs come before it)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()[-1].split()  # fmt: skip


def test_freezing_moves_what_is_alive_out_of_the_collectors_generations():
    before, frozen, count, threshold, full = run(
        """
        import gc
        from hub.process.heap import freeze_heap
        keep = [{"n": i} for i in range(1000)]
        before = gc.get_freeze_count()
        frozen = freeze_heap()
        print(before, frozen, gc.get_freeze_count(), gc.get_threshold()[0], gc.get_threshold()[2])
        """
    )
    assert int(before) == 0
    assert int(frozen) == int(count) > 1000
    assert int(threshold) == GEN0_THRESHOLD
    assert int(full) == GEN2_THRESHOLD


def test_a_started_node_is_frozen():
    """What the runner does once the server listens, on a real node."""
    frozen, threshold = run(
        """
        import asyncio, gc
        from hub.config.settings import load_settings
        from hub.node.node import Node
        from hub.process.heap import freeze_heap
        from hub.process.server import HubServer

        async def main():
            server = HubServer(Node(load_settings({"port": 0, "http_port": 0})))
            await server.start()
            freeze_heap()
            print(gc.get_freeze_count(), gc.get_threshold()[0])
            await server.aclose()

        asyncio.run(main())
        """
    )
    assert int(frozen) > 10_000  # modules, classes, validators, routes…
    assert int(threshold) == GEN0_THRESHOLD
