"""adapters.kit.intake: which events an outbound bridge takes as requests, its bounds (no I/O)."""

from __future__ import annotations

import asyncio
from typing import Any

from adapters.kit.intake import RequestIntake

BRIDGE, SPACE = "bridge", "s"


class Bridge:
    """What a bridge gives the intake: a server that blocks until told, and a
    record of the failures it answered."""

    def __init__(self, **bounds: int):
        self.served: list[dict[str, Any]] = []
        self.finished = 0
        self.refused: list[tuple[Any, str]] = []
        self.release = asyncio.Event()
        options = {"max_request_bytes": 16, "max_concurrency": 1, "max_queued": 1, **bounds}
        self.intake = RequestIntake(BRIDGE, SPACE, serve=self.serve, refuse=self.refuse, **options)

    async def serve(self, event: dict[str, Any]) -> None:
        self.served.append(event)
        await self.release.wait()
        self.finished += 1

    async def until_finished(self, count: int) -> None:
        async with asyncio.timeout(5):
            while self.finished < count:  # noqa: ASYNC110 - no I/O: only other tasks to run
                await asyncio.sleep(0)

    async def refuse(self, event: dict[str, Any], why: str) -> None:
        self.refused.append((event.get("event_id"), why))


def event(event_id: str, **fields: Any) -> dict[str, Any]:
    msg = {"type": "space.event", "space": SPACE, "event_id": event_id, "from": "alice",
           "to": BRIDGE, "data": {"text": "hi"}}  # fmt: skip
    return {**msg, **fields}


def delta(stream_id: str, text: str) -> dict[str, Any]:
    return {"type": "space.event.delta", "space": SPACE, "event_id": stream_id, "from": "alice",
            "to": [BRIDGE], "data": {"text": text}}  # fmt: skip


async def test_only_requests_addressed_to_the_bridge_are_taken():
    bridge = Bridge(max_queued=10)
    for msg in (
        event("e1"),
        event("e2", to="someone-else"),
        event("e3", space="other"),
        event("e4", **{"from": BRIDGE}),
        event("e5", data={"in_reply_to": "e0", "text": "an answer"}),
        event("e6", to=["x", BRIDGE]),
    ):
        await bridge.intake.feed(msg)
    await asyncio.sleep(0)  # the serving tasks start
    assert [e["event_id"] for e in bridge.served] == ["e1", "e6"]
    bridge.release.set()
    await bridge.until_finished(2)
    await bridge.intake.aclose()
    assert bridge.refused == []


async def test_a_streamed_request_is_served_whole_or_answered_lost():
    bridge = Bridge(max_queued=10)
    await bridge.intake.feed(delta("st1", "Hel"))
    await bridge.intake.feed(delta("st1", "lo"))
    await bridge.intake.feed({"type": "space.event.done", "space": SPACE, "event_id": "st1"})
    await bridge.intake.feed(delta("st2", "x" * 10))
    await bridge.intake.feed(delta("st2", "x" * 10))  # past max_request_bytes
    await asyncio.sleep(0)
    assert [(e["event_id"], e["data"]["text"]) for e in bridge.served] == [("st1", "Hello")]
    assert bridge.refused == [("st2", "Request lost: stream larger than 16 bytes")]


async def test_past_the_bound_a_request_is_refused_busy_and_pending_ones_get_a_failure_at_close():
    bridge = Bridge(max_concurrency=1, max_queued=1)
    for n in range(3):
        await bridge.intake.feed(event(f"e{n}"))
    assert bridge.refused == [("e2", "Bridge busy: try again")]
    await bridge.intake.aclose()  # e0 and e1 are still being served
    assert sorted(bridge.refused[1:]) == [
        ("e0", "Bridge shutting down"),
        ("e1", "Bridge shutting down"),
    ]
