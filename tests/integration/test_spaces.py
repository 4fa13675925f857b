"""Spaces: join, leave, members, list, naming, capacity, system spaces."""

import pytest

from tests.support.wsclient import WsClient


async def test_join_members_and_leave(hub):
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    joined = await a.join("general")
    assert joined["members"] == ["alice"] and joined["member_count"] == 1
    joined = await b.join("general")
    assert joined["members"] == ["alice", "bob"] and joined["member_count"] == 2
    note = await a.wait_for("space.members")
    assert note == {
        "type": "space.members",
        "space": "general",
        "members": ["alice", "bob"],
        "member_count": 2,
        "joined": "bob",
        "left": None,
    }
    left = await b.request({"type": "space.leave", "space": "general"})
    assert left["type"] == "space.left" and left["space"] == "general"
    note = await a.wait_for("space.members")
    assert (note["left"], note["joined"], note["members"]) == ("bob", None, ["alice"])
    # Joining twice answers again without a second announcement.
    again = await a.join("general")
    assert again["member_count"] == 1
    await a.close()
    await b.close()


async def test_space_list_is_cluster_view_and_spaces_vanish(hub):
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    await a.join("general")
    await a.join("task.build-1")
    listing = await a.request({"type": "space.list"})
    assert listing["spaces"] == [
        {"id": "agent.status", "type": "system", "member_count": 0},
        {"id": "general", "type": "public", "member_count": 1},
        # MCP is on by default; its agent relays mcp.calls to the observers who may see each call
        {"id": "mcp.calls", "type": "system", "member_count": 1},
        {"id": "task.build-1", "type": "public", "member_count": 1},
    ]
    await a.request({"type": "space.leave", "space": "task.build-1"})
    listing = await a.request({"type": "space.list"})
    assert [s["id"] for s in listing["spaces"]] == ["agent.status", "general", "mcp.calls"]
    await a.close()


async def test_declared_spaces_persist_and_auto_create_off(hub, tmp_path):
    config = tmp_path / "hub.toml"
    config.write_text(
        "auto_create_spaces = false\n"
        '[[spaces]]\nid = "lobby"\n'
        '[[spaces]]\nid = "vip"\ncapacity = 1\n'
    )
    from hub.config.settings import load_settings
    from hub.node.node import Node
    from hub.process.server import HubServer
    from tests.support.servers import FAST

    server = HubServer(Node(load_settings({"port": 0, **FAST}, config)))
    await server.start()
    try:
        a = await WsClient.connect(server.url, "alice")
        listing = await a.request({"type": "space.list"})
        assert {"id": "lobby", "type": "public", "member_count": 0} in listing["spaces"]
        err = await a.request({"type": "space.join", "space": "random"})
        assert err["type"] == "error" and err["code"] == "SPACE_NOT_FOUND"
        await a.join("vip")
        b = await WsClient.connect(server.url, "bob")
        err = await b.request({"type": "space.join", "space": "vip"})
        assert err["code"] == "SPACE_FULL"
        err = await b.request({"type": "space.publish", "space": "random", "data": {}})
        assert err["code"] == "SPACE_NOT_FOUND"
        await a.request({"type": "space.leave", "space": "vip"})
        listing = await a.request({"type": "space.list"})
        assert {"id": "vip", "type": "public", "member_count": 0} in listing["spaces"]
        await a.close()
        await b.close()
    finally:
        await server.aclose()


@pytest.mark.parametrize("name", ["General", "has space", "foo.bar", "x" * 129, "", "a/b"])
async def test_invalid_space_names(hub, name):
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    for kind in ("space.join", "space.publish", "space.leave"):
        msg = {"type": kind, "space": name, "id": "q"}
        if kind == "space.publish":
            msg["data"] = {}
        err = await a.request(msg)
        assert err["type"] == "error" and err["code"] == "INVALID_REQUEST", (kind, err)
        assert err["request_id"] == "q"
    await a.close()


async def test_system_spaces(hub):
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    joined = await a.join("agent.status")
    assert joined["space"] == "agent.status"
    err = await a.request({"type": "space.publish", "space": "agent.status", "data": {"x": 1}})
    assert err["code"] == "UNAUTHORIZED"
    for name in ("mcp.tools", "file.changes", "agent.other"):
        err = await a.request({"type": "space.join", "space": name})
        assert err["code"] == "SPACE_NOT_FOUND", name
    listing = await a.request({"type": "space.list"})
    assert {"id": "agent.status", "type": "system", "member_count": 1} in listing["spaces"]
    await a.close()


async def test_capacity(hub):
    server = await hub(space_capacity=2)
    clients = [await WsClient.connect(server.url, f"a{i}") for i in range(3)]
    await clients[0].join("small")
    await clients[1].join("small")
    err = await clients[2].request({"type": "space.join", "space": "small", "id": "j"})
    assert err == {
        "type": "error",
        "code": "SPACE_FULL",
        "request_id": "j",
        "message": err["message"],
    }
    await clients[1].request({"type": "space.leave", "space": "small"})
    assert (await clients[2].join("small"))["member_count"] == 2
    for c in clients:
        await c.close()


async def test_members_list_is_capped_but_count_exact(hub):
    server = await hub(members_list_limit=3)
    clients = [await WsClient.connect(server.url, f"m{i}") for i in range(5)]
    for c in clients:
        joined = await c.join("crowd")
    assert joined["members"] == ["m0", "m1", "m2"] and joined["member_count"] == 5
    # Joins close together are coalesced (joined: a list); m4's names it.
    note = await clients[0].wait_for("space.members", member_count=5)
    named = note["joined"]
    assert (named if isinstance(named, list) else [named])[-1] == "m4"
    # Above members_list_limit the event names who joined, without the list.
    assert "members" not in note and note["member_count"] == 5
    for c in clients:
        await c.close()


async def test_disconnect_leaves_spaces(hub):
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    await a.join("general")
    await b.join("general")
    # Announced before bob goes: a join and leave within one interval net out.
    await a.wait_for("space.members", joined="bob")
    await b.close()
    note = await a.wait_for("space.members", left="bob")
    assert note["members"] == ["alice"]
    await a.close()
