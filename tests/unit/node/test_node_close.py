"""Node.aclose: every part is closed, and a part that fails to close is logged, not lost."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from hub.config.settings import load_settings
from hub.node.node import Node
from tests.support.servers import FAST


class Broken:
    """An adapter whose close fails."""

    system_spaces: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.closed = False

    async def start(self, host: Any) -> None:
        pass

    async def aclose(self) -> None:
        self.closed = True
        raise RuntimeError("adapter close broke")


async def test_failures_at_close_are_logged_and_the_rest_still_closes():
    with capture_logs() as logs:
        first, second = Broken(), Broken()
        node = Node(load_settings({"port": 0, **FAST}), adapters=[first, second])
        await node.start()
        kv_closed: list[bool] = []

        async def kv_close() -> None:
            kv_closed.append(True)

        async def leave() -> None:
            raise ConnectionError("redis went away")

        node.presence.leave_cluster = leave  # type: ignore[method-assign]
        node.kv.aclose = kv_close  # type: ignore[method-assign]
        await node.aclose()
    failed = [e for e in logs if e["event"] == "failed to close"]
    assert [e["part"] for e in failed] == [
        "adapter Broken",
        "adapter Broken",
        "presence (leaving the cluster)",
    ]
    assert all(e["log_level"] == "error" and e.get("exc_info") for e in failed)
    assert first.closed and second.closed and kv_closed == [True]
    await node.aclose()  # idempotent: nothing more
