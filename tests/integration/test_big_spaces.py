"""Membership at scale: who hears of joins and leaves, and paging the member list."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from agora_client import MembersChanged
from tests.support.wsclient import WsClient

TIMEOUT = 10.0


async def connect_all(url: str, ids: list[str]) -> list[WsClient]:
    return list(await asyncio.gather(*(WsClient.connect(url, a) for a in ids)))


async def close_all(clients: list[WsClient]) -> None:
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


async def test_join_and_leave_events_by_space_size(hub):
    """Full list up to members_list_limit, then joined/left without it, then nothing."""
    # Each change its own event (no coalescing), to see every size pass.
    server = await hub(members_list_limit=3, member_events_limit=5, member_events_interval=0)
    first = await WsClient.connect(server.url, "m0")
    await first.join("crowd")
    others = await connect_all(server.url, [f"m{i}" for i in range(1, 7)])
    for i, c in enumerate(others, start=1):
        joined = await c.join("crowd")
        # space.joined: capped array, exact count, whatever the size.
        assert joined["member_count"] == i + 1
        assert joined["members"] == [f"m{j}" for j in range(min(i + 1, 3))]
    notes = [await first.wait_for("space.members", joined=f"m{i}") for i in range(1, 5)]
    assert [n["members"] for n in notes[:2]] == [["m0", "m1"], ["m0", "m1", "m2"]]
    assert all("members" not in n for n in notes[2:])  # 4 members > list limit 3
    assert [n["member_count"] for n in notes] == [2, 3, 4, 5]
    # m5 and m6 made the space bigger than member_events_limit: nobody heard.
    # A leave in a big space is not told either; one below the limit is.
    await others[5].request({"type": "space.leave", "space": "crowd"})  # 7 → 6
    await others[4].request({"type": "space.leave", "space": "crowd"})  # 6 → 5
    note = await first.wait_for("space.members", left="m5")
    assert "members" not in note and note["member_count"] == 5 and note["joined"] is None
    await others[3].close()  # a disconnect: 5 → 4
    note = await first.wait_for("space.members", left="m4")
    assert "members" not in note and note["member_count"] == 4
    await others[2].request({"type": "space.leave", "space": "crowd"})  # 4 → 3
    note = await first.wait_for("space.members", left="m3")
    assert note["members"] == ["m0", "m1", "m2"] and note["member_count"] == 3
    # What first received about crowd, in order: nothing about m5, m6 or m7's leave.
    seen = [
        (m.get("joined"), m.get("left")) for m in first.backlog if m.get("type") == "space.members"
    ]
    assert ("m5", None) not in seen and ("m6", None) not in seen and (None, "m6") not in seen
    await close_all([first, *others])


async def test_declared_space_sets_its_own_limits(hub, tmp_path):
    config = tmp_path / "hub.toml"
    config.write_text(
        '[[spaces]]\nid = "quiet"\nmember_events_limit = 1\n\n'
        '[[spaces]]\nid = "listed"\nmembers_list_limit = 10\n'
    )
    server = await hub(config=str(config), members_list_limit=1)
    a, b, c = await connect_all(server.url, ["a", "b", "c"])
    for space in ("quiet", "listed", "plain"):
        await a.join(space)
        await b.join(space)
    note = await a.wait_for("space.members", space="listed", joined="b")
    assert note["members"] == ["a", "b"]
    note = await a.wait_for("space.members", space="plain", joined="b")
    assert "members" not in note and note["member_count"] == 2
    # "quiet": nobody hears of joins once it has more than one member.
    await c.join("quiet")
    await c.join("plain")
    await a.wait_for("space.members", space="plain", joined="c")
    assert not [m for m in a.backlog if m.get("space") == "quiet"]
    await close_all([a, b, c])


async def test_space_members_request_pages_the_members(hub):
    server = await hub(members_list_limit=2)
    ids = [f"agent-{i:02d}" for i in range(23)][::-1]
    clients = await connect_all(server.url, ids)
    for c in clients:
        await c.join("big")
    asker = clients[0]
    got, cursor, pages = [], None, 0
    while True:
        msg = {"type": "space.members", "space": "big", "limit": 10}
        if cursor is not None:
            msg["cursor"] = cursor
        page = await asker.request(msg)
        assert page["type"] == "space.members" and page["member_count"] == 23
        assert len(page["members"]) <= 10 and "joined" not in page
        got += page["members"]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert got == ids and pages == 3
    # Anyone may page an existing space, member or not; the default page is 100.
    outsider = await WsClient.connect(server.url, "outsider")
    page = await outsider.request({"type": "space.members", "space": "big"})
    assert page["members"] == ids and page["next_cursor"] is None
    for bad, code in (
        ({"space": "nowhere"}, "SPACE_NOT_FOUND"),
        ({"space": "Bad Name"}, "INVALID_REQUEST"),
        ({"space": "big", "limit": 1001}, "INVALID_REQUEST"),
        ({"space": "big", "limit": 0}, "INVALID_REQUEST"),
        ({"space": "big", "cursor": "not-a-cursor"}, "INVALID_REQUEST"),
        ({"space": "big", "cursor": 5}, "INVALID_REQUEST"),
    ):
        reply = await outsider.request({"type": "space.members", **bad})
        assert reply["type"] == "error" and reply["code"] == code, (bad, reply)
        assert reply["request_id"]
    # The declared agent.status space pages too (it always exists).
    page = await outsider.request({"type": "space.members", "space": "agent.status"})
    assert page["members"] == [] and page["member_count"] == 0
    await close_all([*clients, outsider])


async def test_sdk_pages_members_and_sees_big_space_events(hub, clients):
    server = await hub(members_list_limit=2, member_events_interval=0)  # an event per join
    a = await clients(server, "a")
    await a.join("room")
    changes = a.events("room", members=True)
    others = [await clients(server, f"o{i}") for i in range(3)]
    for o in others:
        await o.join("room")
    seen: list[MembersChanged] = []
    async with asyncio.timeout(TIMEOUT):
        while len(seen) < 3:
            item = await changes.get()
            if isinstance(item, MembersChanged):
                seen.append(item)
    assert [m.members for m in seen] == [["a", "o0"], None, None]
    assert [m.joined for m in seen] == ["o0", "o1", "o2"]
    assert a.known_members("room") == ["a", "o0"]  # the last list the hub sent
    page = await a.members("room", limit=3)
    assert page.members == ["a", "o0", "o1"] and page.member_count == 4 and page.next_cursor
    assert await a.all_members("room", page_size=1) == ["a", "o0", "o1", "o2"]


@pytest.mark.redis
async def test_paging_and_events_are_cluster_wide(redis_server, hub):
    settings = {"redis_url": redis_server.url, "members_list_limit": 1}
    n0 = await hub(node_id="n0", **settings)
    n1 = await hub(node_id="n1", **settings)
    a = await WsClient.connect(n0.url, "a")
    b = await WsClient.connect(n1.url, "b")
    c = await WsClient.connect(n0.url, "c")
    await a.join("room")
    await b.join("room")
    note = await a.wait_for("space.members", joined="b")
    assert "members" not in note and note["member_count"] == 2
    await c.join("room")
    await b.wait_for("space.members", joined="c")
    page = await b.request({"type": "space.members", "space": "room", "limit": 2})
    assert page["members"] == ["a", "b"] and page["member_count"] == 3
    rest = await a.request(
        {"type": "space.members", "space": "room", "cursor": page["next_cursor"]}
    )
    assert rest["members"] == ["c"] and rest["next_cursor"] is None
    await close_all([a, b, c])


def test_reply_and_event_parse_as_hub_messages():
    from protocol import codec
    from protocol.messages import SpaceMembers, hub_message_adapter

    event = hub_message_adapter.validate_json(codec.members("s", None, 5000, "x", None))
    assert isinstance(event, SpaceMembers) and event.members is None and event.joined == "x"
    reply = hub_message_adapter.validate_json(codec.members_page("r1", "s", ["a"], 9, "17"))
    assert isinstance(reply, SpaceMembers) and reply.id == "r1" and reply.next_cursor == "17"
    assert "joined" not in orjson.loads(codec.members_page("r1", "s", [], 0, None))
