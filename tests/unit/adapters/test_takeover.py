"""adapters.kit.takeover: which requests a lost bridge holder left unanswered."""

from __future__ import annotations

from typing import Any

from adapters.kit.takeover import unanswered


class History:
    """``space.history`` over a list of events, in pages of ``page`` (as the hub pages)."""

    def __init__(self, events: list[dict[str, Any]], page: int = 2):
        self.agent_id = "bridge"
        self.events = events
        self.page = page
        self.reads = 0

    async def request(self, msg: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        self.reads += 1
        older = [e for e in self.events if e["seq"] < msg["before_seq"]]
        page = older[-self.page :]
        more = len(older) > len(page)
        return {
            "type": "space.history",
            "events": page,
            "next_before_seq": page[0]["seq"] if more else None,
        }


def event(seq: int, sender: str, to: Any = None, reply: str | None = None) -> dict[str, Any]:
    data = {"in_reply_to": reply} if reply else {}
    e = {"type": "space.event", "seq": seq, "event_id": f"e{seq}", "from": sender, "data": data}
    if to is not None:
        e["to"] = to
    return e


def keys(e: dict[str, Any]) -> tuple[str, ...]:
    return () if e["data"].get("in_reply_to") else (e["event_id"],)


def answer(e: dict[str, Any]) -> str | None:
    return e["data"].get("in_reply_to")


async def test_requests_without_an_answer_from_the_bridge_oldest_first():
    history = History(
        [
            event(1, "alice", "bridge"),  # answered below
            event(2, "bob", ["x", "bridge"]),  # not answered
            event(3, "bridge", "alice", reply="e1"),
            event(4, "carol", "bridge"),  # not answered
            event(5, "alice"),  # not addressed to the bridge
            event(6, "dave", "bridge", reply="e2"),  # someone else's reply: not a request
            event(7, "erin", "bridge"),  # after upto_seq: reaches the holder live
        ]
    )
    found = await unanswered(history, "s", 6, request_keys=keys, answer_key=answer)
    assert [e["seq"] for e in found] == [2, 4]
    assert history.reads == 3  # paged back to the start


async def test_an_answer_may_name_any_of_a_requests_keys():
    history = History([event(1, "alice", "bridge"), event(2, "bridge", "alice", reply="alias")])
    found = await unanswered(
        history, "s", 2, request_keys=lambda e: ("e1", "alias"), answer_key=answer
    )
    assert found == []


async def test_reading_back_is_bounded():
    history = History([event(i, "alice", "bridge") for i in range(1, 501)], page=100)
    found = await unanswered(
        history, "s", 500, request_keys=keys, answer_key=answer, max_events=200
    )
    assert [e["seq"] for e in found] == list(range(301, 501))
    assert history.reads == 2


async def test_an_answer_streamed_as_deltas_counts():
    streamed = {"type": "space.event.delta", "seq": 3, "event_id": "bridge/s1", "from": "bridge",
                "data": {"in_reply_to": "e1", "text": "par"}}  # fmt: skip
    later = {"type": "space.event.delta", "seq": 4, "event_id": "bridge/s1", "from": "bridge",
             "data": {"text": "ts"}}  # fmt: skip
    history = History([event(1, "alice", "bridge"), event(2, "bob", "bridge"), streamed, later])
    found = await unanswered(history, "s", 4, request_keys=keys, answer_key=answer)
    assert [e["seq"] for e in found] == [2]
