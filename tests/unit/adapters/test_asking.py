"""adapters.kit.asking: one ask, and the agent told to stop when the caller stops waiting (no I/O).

The publisher is a recorder standing in for the face's joined member; the
replies are literal frames fed to the real ReplyWaiters.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.kit.asking import AskCancelled, Asker, AskTimeout, first_of
from adapters.kit.replies import ReplyWaiters
from hub.adapter_host import RequestFailed


class Recorder:
    """Publishes by numbering events; records publishes and member requests."""

    def __init__(self) -> None:
        self.published: list[tuple[str, dict[str, Any], Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.refuse_cancels = False
        self.member = self
        self.first = asyncio.Event()

    async def publish(self, space: str, data: dict[str, Any], *, to: Any = None) -> dict[str, Any]:
        if data.get("cancel") and self.refuse_cancels:
            raise RequestFailed({"code": "INVALID_REQUEST", "message": "not a member"})
        self.published.append((space, data, to))
        self.first.set()
        return {"type": "space.published", "event_id": f"e{len(self.published)}"}

    async def request(self, msg: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        self.requests.append(msg)
        return {"type": "space.event.cancel", "event_id": msg["event_id"]}

    @property
    def cancels(self) -> list[tuple[str, dict[str, Any], Any]]:
        return [p for p in self.published if p[1].get("cancel")]


def make() -> tuple[Asker, Recorder, ReplyWaiters]:
    recorder = Recorder()
    waiters = ReplyWaiters(1000)
    return Asker(recorder, waiters), recorder, waiters


def reply(event_id: str, text: str, sender: str = "bob", space: str = "s") -> dict[str, Any]:
    return {"type": "space.event", "space": space, "from": sender, "event_id": "r1",
            "data": {"in_reply_to": event_id, "text": text}}  # fmt: skip


def delta(event_id: str, text: str, sender: str = "bob", to: Any = "me") -> dict[str, Any]:
    """A reply stream's delta, addressed to the asking member ("me") unless ``to``."""
    data = {"in_reply_to": event_id, "text": text}
    frame = {"type": "space.event.delta", "space": "s", "from": sender,
             "event_id": f"{sender}/ans", "data": data}  # fmt: skip
    if to is not None:
        frame["to"] = to
    return frame


async def test_an_answer_from_the_addressee_is_the_answer_and_nobody_is_told():
    asker, recorder, waiters = make()
    asking = await asker.send("s", {"text": "q"}, to="bob")
    waiters.feed(reply("e1", "not you", sender="eve"))  # not addressed: ignored
    waiters.feed(reply("e1", "elsewhere", space="t"))  # another space: ignored
    waiters.feed(reply("e1", "yes"))
    whole = await asking.answer(5)
    assert whole.data["text"] == "yes"
    await asking.cancel()  # after the answer: nothing to stop
    assert recorder.cancels == [] and recorder.requests == [] and len(waiters) == 0


async def test_a_timeout_before_the_reply_started_publishes_a_cancel_to_the_addressees():
    asker, recorder, waiters = make()
    with pytest.raises(AskTimeout):
        await asker.ask("s", {"text": "q"}, to=["bob", "carol"], timeout=0.01)
    assert recorder.cancels == [
        ("s", {"cancel": True, "in_reply_to": "e1", "reason": "timeout"}, ["bob", "carol"])
    ]
    assert recorder.requests == [] and len(waiters) == 0


async def test_an_unaddressed_request_is_cancelled_in_the_whole_space():
    asker, recorder, _ = make()
    asking = await asker.send("s", {"text": "q"})
    await asking.cancel("caller_gone")
    assert recorder.cancels == [
        ("s", {"cancel": True, "in_reply_to": "e1", "reason": "caller_gone"}, None)
    ]


async def test_a_started_stream_is_cancelled_as_a_receiver():
    asker, recorder, waiters = make()
    asking = await asker.send("s", {"text": "q"}, to="bob")
    waiters.feed(delta("e1", "once upon"))
    assert asking.stream_id == "bob/ans"
    gone = asyncio.get_running_loop().create_future()
    waiting = asyncio.create_task(asking.answer(5, gone=gone))
    gone.set_result(None)
    with pytest.raises(AskCancelled) as raised:
        await waiting
    assert raised.value.reason == "caller_gone"
    assert recorder.requests == [
        {"type": "space.event.cancel", "space": "s", "event_id": "bob/ans"}
    ]
    assert recorder.cancels == [] and len(waiters) == 0 and waiters.assembling == 0


async def test_a_started_stream_others_receive_too_also_tells_its_producer():
    """Unaddressed, it goes on for the space's other members: the receiver
    cancel stops this member's copy, the event tells the producer."""
    asker, recorder, waiters = make()
    asking = await asker.send("s", {"text": "q"})
    waiters.feed(delta("e1", "once upon", to=None))
    await asking.cancel("caller_gone")
    assert recorder.requests == [
        {"type": "space.event.cancel", "space": "s", "event_id": "bob/ans"}
    ]
    assert recorder.cancels == [
        ("s", {"cancel": True, "in_reply_to": "e1", "reason": "caller_gone"}, ["bob"])
    ]


async def test_cancelling_the_waiting_task_tells_the_agent_and_propagates():
    asker, recorder, _ = make()
    waiting = asyncio.create_task(asker.ask("s", {"text": "q"}, to="bob", timeout=30))
    await asyncio.wait_for(recorder.first.wait(), 5)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asker.aclose()
    assert [c[1]["reason"] for c in recorder.cancels] == ["cancelled"]


async def test_cancel_from_another_task_ends_the_wait_once():
    asker, recorder, _ = make()
    asking = await asker.send("s", {"text": "q"}, to="bob")
    waiting = asyncio.create_task(asking.answer(30))
    await asking.cancel("canceled")
    await asking.cancel("again")
    with pytest.raises(AskCancelled) as raised:
        await waiting
    assert raised.value.reason == "canceled"
    assert len(recorder.cancels) == 1


async def test_a_relay_is_stopped_and_its_stream_cancelled():
    asker, recorder, waiters = make()
    asking = await asker.send("s", {"text": "q"}, to="bob", relay=True)
    assert asking.relay is not None
    waiters.feed(delta("e1", "piece"))
    piece = await asking.relay.next()
    assert piece.kind == "delta"
    await asking.cancel("canceled")
    assert recorder.requests[0]["event_id"] == "bob/ans"
    assert len(waiters) == 0


async def test_a_refused_cancel_is_logged_not_raised():
    asker, recorder, _ = make()
    recorder.refuse_cancels = True
    with pytest.raises(AskTimeout):
        await asker.ask("s", {"text": "q"}, to="bob", timeout=0.01)
    assert recorder.cancels == []


async def test_first_of_wakes_on_any_future_and_leaves_no_callback() -> None:
    loop = asyncio.get_running_loop()
    a, b = loop.create_future(), loop.create_future()
    loop.call_soon(b.set_result, None)
    assert await first_of((a, b), timeout=30) is True
    assert not a._callbacks  # type: ignore[attr-defined]  # nothing left on the pending one


async def test_first_of_times_out_and_answers_at_once_when_one_is_done() -> None:
    loop = asyncio.get_running_loop()
    pending = loop.create_future()
    assert await first_of((pending,), timeout=0.01) is False
    assert not pending._callbacks  # type: ignore[attr-defined]
    done = loop.create_future()
    done.set_result(1)
    assert await first_of((pending, done), timeout=30) is True
