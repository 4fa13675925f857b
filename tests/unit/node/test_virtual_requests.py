"""A virtual member's requests: answered, refused, or given up on after ``timeout``."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from hub.core.frames import OutFrame
from hub.node.virtual import RequestFailed, VirtualMember


def member(answer: Any) -> VirtualMember:
    """A member whose requests ``answer(member, msg)`` handles as the node would."""

    async def receive(peer: Any, frame: str, now: float) -> None:
        answer(peer, orjson.loads(frame))

    async def detach(m: VirtualMember) -> None:
        return None

    return VirtualMember(
        "gw", "v-1", receive, None,
        session=None, record=None, detach=detach,  # type: ignore[arg-type]
    )  # fmt: skip


def reply(peer: VirtualMember, msg: dict[str, Any]) -> None:
    peer.push(OutFrame(orjson.dumps(msg), preframe=False))


async def test_a_request_answered_at_once_returns_its_reply():
    vm = member(lambda m, msg: reply(m, {"type": "space.joined", "id": msg["id"], "space": "s"}))
    joined = await vm.request({"type": "space.join", "space": "s"}, timeout=5)
    assert joined["type"] == "space.joined" and joined["space"] == "s"


async def test_a_request_answered_later_returns_its_reply():
    loop = asyncio.get_running_loop()

    def later(m: VirtualMember, msg: dict[str, Any]) -> None:
        loop.call_later(0.01, reply, m, {"type": "space.left", "id": msg["id"], "space": "s"})

    vm = member(later)
    assert (await vm.request({"type": "space.leave", "space": "s"}, timeout=5))["type"] == (
        "space.left"
    )


async def test_an_error_reply_raises_request_failed():
    vm = member(
        lambda m, msg: reply(m, {"type": "error", "code": "UNAUTHORIZED", "request_id": msg["id"]})
    )
    with pytest.raises(RequestFailed) as failed:
        await vm.request({"type": "space.join", "space": "s"}, timeout=5)
    assert failed.value.code == "UNAUTHORIZED"


async def test_an_unanswered_request_times_out_and_is_forgotten():
    vm = member(lambda m, msg: None)
    with pytest.raises(TimeoutError):
        await vm.request({"type": "space.join", "space": "s"}, timeout=0.05)
    assert not vm._waiting  # nothing left waiting for a reply that may never come
    # A late reply to it is no one's: dropped, not an error.
    reply(vm, {"type": "space.joined", "id": "v-1-1", "space": "s"})


def event(n: int) -> OutFrame:
    msg = {"type": "space.event", "space": "s", "from": "other", "event_id": f"e{n}"}
    return OutFrame(orjson.dumps(msg), preframe=False)


async def test_take_deals_with_a_message_in_its_delivery_and_keeps_the_order():
    handled: list[str] = []
    taken: list[str] = []
    release = asyncio.Event()
    busy = asyncio.Event()
    done = asyncio.Event()

    async def handler(msg: dict[str, Any]) -> None:
        handled.append(msg["event_id"])
        if msg["event_id"] == "e1":
            busy.set()
            await release.wait()  # the handler is busy with e1
        if len(handled) == 2:
            done.set()

    def take(msg: dict[str, Any]) -> bool:
        taken.append(msg["event_id"])
        return msg["event_id"] != "e1"  # e1 is left to the handler

    async def receive(peer: Any, frame: str, now: float) -> None:
        return None

    async def detach(m: VirtualMember) -> None:
        return None

    vm = VirtualMember(
        "gw", "v-1", receive, handler, session=None, record=None,  # type: ignore[arg-type]
        detach=detach, shared=True, take=take,
    )  # fmt: skip
    vm.start()
    assert vm.push(event(0))  # taken at once: never queued, never handled
    assert taken == ["e0"] and handled == []
    vm.push(event(1))  # not taken: queued for the handler
    async with asyncio.timeout(5):
        await busy.wait()
    # While the handler works on e1, later messages queue behind it, untried.
    vm.push(event(2))
    assert taken == ["e0", "e1"]
    release.set()
    async with asyncio.timeout(5):
        await done.wait()
    assert handled == ["e1", "e2"]
    await vm.aclose()
