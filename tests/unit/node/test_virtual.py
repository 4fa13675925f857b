"""hub.node.virtual: an adapter's agent inside the node, without a node.

The node's side is two callables: ``receive`` (what the member sends, as the
dispatcher would get it) and ``detach`` (the host's clean-up); what the node
sends the member arrives through ``push`` as encoded frames.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from hub.adapter_host import RequestFailed
from hub.core.agent_record import AgentRecord
from hub.core.frames import OutFrame
from hub.node.virtual import VirtualMember
from protocol.errors import CloseCode, ErrorCode


class Node:
    """Records what the member sends and whether it was detached."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.detached = 0
        self.gone = asyncio.Event()

    async def receive(self, peer: Any, frame: str, now: float) -> None:
        self.sent.append(orjson.loads(frame))
        self.arrived.set()

    async def detach(self, member: VirtualMember) -> None:
        self.detached += 1
        self.gone.set()


class Handler:
    def __init__(self, fail_on: str | None = None) -> None:
        self.got: list[dict[str, Any]] = []
        self.changed = asyncio.Event()
        self.fail_on = fail_on

    async def __call__(self, msg: dict[str, Any]) -> None:
        self.got.append(msg)
        self.changed.set()
        if msg.get("type") == self.fail_on:
            raise RuntimeError("adapter bug")

    async def until(self, count: int) -> None:
        async with asyncio.timeout(5):
            while len(self.got) < count:
                self.changed.clear()
                await self.changed.wait()


def member(node: Node, handler: Handler | None = None, **options: Any) -> VirtualMember:
    m = VirtualMember(
        "bridge", "v-1", node.receive, handler,
        session=None,  # type: ignore[arg-type]  # not used by what is tested here
        record=AgentRecord("bridge", "n1", "v-1"),
        detach=node.detach, **options,
    )  # fmt: skip
    m.start()
    return m


def frame(msg: dict[str, Any]) -> OutFrame:
    return OutFrame(orjson.dumps(msg), preframe=False)


async def sent_request(node: Node) -> dict[str, Any]:
    await asyncio.wait_for(node.arrived.wait(), 5)
    node.arrived.clear()
    return node.sent[-1]


async def test_a_request_gets_the_reply_that_names_its_id():
    node = Node()
    m = member(node)
    asking = asyncio.create_task(m.join("lab"))
    sent = await sent_request(node)
    assert sent["type"] == "space.join" and sent["space"] == "lab" and sent["id"] == "v-1-1"
    assert m.push(frame({"type": "space.joined", "id": "other", "space": "lab"}))  # not it
    assert not asking.done()
    assert m.push(frame({"type": "space.joined", "id": "v-1-1", "space": "lab", "seq": 4}))
    assert (await asking)["seq"] == 4


async def test_an_error_reply_raises_request_failed():
    node = Node()
    m = member(node)
    asking = asyncio.create_task(m.publish("lab", {"text": "hi"}, to="bob", echo=False))
    sent = await sent_request(node)
    assert sent["to"] == "bob" and sent["echo"] is False
    m.push(frame({"type": "error", "request_id": sent["id"], "code": "RATE_LIMITED",
                  "message": "slow down"}))  # fmt: skip
    with pytest.raises(RequestFailed) as failed:
        await asking
    assert failed.value.code == "RATE_LIMITED"


async def test_what_json_cannot_carry_is_refused_as_invalid_not_a_type_error():
    node = Node()
    m = member(node)
    with pytest.raises(RequestFailed) as failed:
        await m.publish("lab", {1: "non-string key"})  # type: ignore[dict-item]
    assert failed.value.code == str(ErrorCode.INVALID_REQUEST)
    assert node.sent == []


async def test_other_messages_reach_the_handler_in_order_without_its_own_echo():
    node, handler = Node(), Handler()
    m = member(node, handler)
    for n, sender in enumerate(["alice", "bridge", "bob"]):
        m.push(frame({"type": "space.event", "from": sender, "seq": n}))
    await handler.until(2)
    assert [msg["seq"] for msg in handler.got] == [0, 2]
    await m.aclose()


async def test_a_handler_that_fails_is_logged_and_the_next_message_still_arrives():
    node, handler = Node(), Handler(fail_on="space.members")
    m = member(node, handler)
    with capture_logs() as logs:
        m.push(frame({"type": "space.members", "from": "alice"}))
        m.push(frame({"type": "space.event", "from": "alice"}))
        await handler.until(2)
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["adapter handler failed"]
    await m.aclose()


async def test_a_slow_adapter_loses_messages_past_its_queue_bound_and_says_so_once():
    node, handler = Node(), Handler()
    one = frame({"type": "space.event", "from": "alice", "text": "x" * 100})
    m = member(node, handler, queue_bytes=2 * len(one.payload))
    with capture_logs() as logs:
        results = [m.push(one) for _ in range(4)]  # the consumer has not run yet
    assert results == [True, True, False, False] and m.dropped == 2
    assert [e["event"] for e in logs] == ["virtual member queue full: dropping messages"]
    await handler.until(2)
    await m.aclose()


async def test_closing_detaches_once_and_cancels_waiting_requests():
    node = Node()
    m = member(node, Handler())
    asking = asyncio.create_task(m.request({"type": "space.list"}))
    await sent_request(node)
    await m.aclose()
    await m.aclose()
    assert node.detached == 1 and m.closing
    with pytest.raises(asyncio.CancelledError):
        await asking
    assert not m.push(frame({"type": "space.event", "from": "alice"}))


async def test_the_hub_closing_it_closes_it_in_the_background():
    node = Node()
    m = member(node)
    with capture_logs() as logs:
        m.close_for(CloseCode.HEARTBEAT_TIMEOUT, ErrorCode.HEARTBEAT_TIMEOUT, "replaced")
        m.close_for(CloseCode.HEARTBEAT_TIMEOUT, ErrorCode.HEARTBEAT_TIMEOUT, "again")
    assert m.closing and [e["reason"] for e in logs] == ["replaced"]
    await asyncio.wait_for(node.gone.wait(), 5)
    assert node.detached == 1
    assert await m.probe(1.0) is False
