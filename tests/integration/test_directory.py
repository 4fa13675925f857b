"""The agent directory (``agent.list``) and what agents declare about themselves."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlencode

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from agora_client import Event
from tests.integration.test_cli_tools import cli, json_lines
from tests.support.wsclient import WsClient

TIMEOUT = 10.0


async def status_events(sub, n: int) -> list[Event]:
    out = []
    async with asyncio.timeout(TIMEOUT):
        while len(out) < n:
            out.append(await sub.get())
    return out


async def test_declared_details_are_in_the_first_online_event(hub, clients):
    """Regression: `online` said type null, then `updated` brought the details."""
    server = await hub()
    watcher = await clients(server, "watcher")
    await watcher.join("agent.status")
    sub = watcher.events("agent.status")
    await clients(
        server, "worker", agent_type="tool", capabilities=["urn:x:resize"], metadata={"v": 2}
    )
    await clients(server, "plain")
    first, second = await status_events(sub, 2)
    assert first.data["event"] == "online"
    assert first.data["agent"] == {
        "id": "worker",
        "type": "tool",
        "capabilities": ["urn:x:resize"],
        "metadata": {"v": 2},
    }
    # Nothing else came for "worker" (no `updated`) before the next agent's online.
    assert second.data["event"] == "online" and second.data["agent"]["id"] == "plain"
    entry = (await watcher.list_agents(capability="urn:x:resize")).agents
    assert [(a.id, a.type, a.metadata) for a in entry] == [("worker", "tool", {"v": 2})]


async def test_bad_details_in_the_handshake_are_refused_with_400(hub):
    server = await hub()
    for query in (
        [("type", "x" * 65)],
        [("capability", "c" * 129)],
        [("metadata", "[1, 2]")],
        [("metadata", "{not json")],
        [("type", "a"), ("type", "b")],
    ):
        url = f"{server.url}?{urlencode([('agent_id', 'a'), *query])}"
        with pytest.raises(InvalidStatus) as info:
            async with connect(url):
                pass
        assert info.value.response.status_code == 400


async def test_partial_register_keeps_what_it_does_not_mention(hub, clients):
    """Regression: `agent.register` with only metadata erased type and capabilities."""
    server = await hub()
    watcher = await clients(server, "watcher")
    await watcher.join("agent.status")
    sub = watcher.events("agent.status")
    raw = await WsClient.connect(server.url, "agent-x")
    full = {"id": "agent-x", "type": "llm", "capabilities": ["chat"], "metadata": {"a": 1}}
    await raw.request({"type": "agent.register", "agent": full})
    await raw.request({"type": "agent.register", "agent": {"id": "agent-x", "metadata": {"b": 2}}})
    await raw.request({"type": "agent.register", "agent": {"id": "agent-x", "type": None}})
    events = await status_events(sub, 4)
    assert [e.data["event"] for e in events] == ["online", "updated", "updated", "updated"]
    assert events[2].data["agent"] == {
        "id": "agent-x",
        "type": "llm",
        "capabilities": ["chat"],
        "metadata": {"b": 2},
    }
    assert events[3].data["agent"]["type"] is None  # explicitly cleared
    assert events[3].data["agent"]["capabilities"] == ["chat"]
    # The SDK follows the same rule.
    await raw.close()
    c = await clients(server, "sdk", agent_type="llm", capabilities=["chat"])
    await c.register(metadata={"m": 1})
    (entry,) = (await watcher.list_agents(capability="chat")).agents
    assert (entry.id, entry.type, entry.metadata) == ("sdk", "llm", {"m": 1})


async def test_agent_list_filters_pages_and_shapes(hub, clients):
    server = await hub()
    started = time.time() * 1000
    agents = {
        "w1": ["https://ex.org/weather", "chat"],
        "w2": ["https://ex.org/weather/v2"],
        "c1": ["chat"],
        "n1": [],
    }
    for aid, caps in agents.items():
        await clients(server, aid, capabilities=caps or None)
    asker = await WsClient.connect(server.url, "asker")
    reply = await asker.request({"type": "agent.list", "capability": "https://ex.org/*"})
    assert reply["type"] == "agent.list" and reply["next_cursor"] is None
    assert [a["id"] for a in reply["agents"]] == ["w1", "w2"]
    entry = reply["agents"][0]
    assert set(entry) == {"id", "type", "capabilities", "metadata", "node", "connected_at"}
    assert entry["capabilities"] == ["https://ex.org/weather", "chat"]
    assert entry["node"] == server.node.node_id
    assert started - 1000 <= entry["connected_at"] <= time.time() * 1000 + 1000
    # Everyone, a page at a time.
    ids, cursor = [], None
    while True:
        msg = {"type": "agent.list", "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = await asker.request(msg)
        assert len(page["agents"]) <= 2
        ids += [a["id"] for a in page["agents"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert ids == ["asker", "c1", "n1", "w1", "w2"]
    # By membership of a space (join order), combined with a capability.
    for aid in ("w2", "c1", "w1"):
        await (await clients(server, f"{aid}-2", capabilities=agents[aid] or None)).join("room")
    reply = await asker.request({"type": "agent.list", "space": "room", "capability": "chat"})
    assert [a["id"] for a in reply["agents"]] == ["c1-2", "w1-2"]
    for bad in (
        {"limit": 5000},
        {"cursor": "no spaces allowed"},
        {"space": "Not A Space"},
        {"capability": 7},
    ):
        err = await asker.request({"type": "agent.list", **bad})
        assert err["type"] == "error" and err["code"] == "INVALID_REQUEST", (bad, err)
    await asker.close()


async def test_agents_list_command_prints_a_table(hub_process, clients):
    proc = hub_process()
    await clients(proc.url, "resizer", agent_type="tool", capabilities=["urn:img:resize"])
    await clients(proc.url, "chatter", capabilities=["chat"])
    status, out, err = await cli("agents", "--list", "--url", proc.url, "--agent-id", "lister")
    assert status == 0, err
    rows = json_lines(out)  # not a terminal: JSON lines
    assert [r["id"] for r in rows] == ["chatter", "lister", "resizer"]
    assert rows[2]["type"] == "tool" and rows[2]["capabilities"] == ["urn:img:resize"]
    status, out, err = await cli(
        "agents", "--list", "--capability", "urn:img:*", "--url", proc.url, "--agent-id", "l2"
    )
    assert status == 0, err
    assert [r["id"] for r in json_lines(out)] == ["resizer"]


def test_agents_table_on_a_terminal():
    import io

    from agora_client.cli import Output, _list_agents
    from agora_client.models import AgentEntry, AgentPage

    class Fake:
        agent_id = "cli-1234abcd"

        async def find_agents(self, **filters):
            assert filters == {"capability": "chat", "space": None}
            return AgentPage(
                [AgentEntry("a1", "llm", ["chat", "code"], {}, "node-1", 1_700_000_000_000)], None
            ).agents

    class Args:
        capability, space, agent_id = "chat", None, None

    buf = io.StringIO()
    assert asyncio.run(_list_agents(Fake(), Args(), Output(buf, json_lines=False))) == 0
    header, row = buf.getvalue().splitlines()
    assert header.split() == ["AGENT", "TYPE", "NODE", "CONNECTED", "CAPABILITIES"]
    assert row.split()[:3] == ["a1", "llm", "node-1"] and row.endswith("chat,code")


@pytest.mark.redis
async def test_directory_is_cluster_wide(redis_server, hub, clients):
    n0 = await hub(node_id="n0", redis_url=redis_server.url)
    n1 = await hub(node_id="n1", redis_url=redis_server.url)
    await clients(n0, "on-n0", capabilities=["x:1"])
    await clients(n1, "on-n1", capabilities=["x:2"])
    asker = await clients(n1, "asker")
    found = await asker.find_agents(capability="x:*")
    assert [(a.id, a.node) for a in found] == [("on-n0", "n0"), ("on-n1", "n1")]
    raw = orjson.loads(orjson.dumps([a.capabilities for a in found]))
    assert raw == [["x:1"], ["x:2"]]
    other = await clients(n0, "other")
    await other.join("agent.status")
    status = other.events("agent.status")
    await asker.aclose()  # gone from the directory once it is offline
    async with asyncio.timeout(TIMEOUT):
        while (event := await status.get()).data["event"] != "offline":
            pass
    assert event.data["agent"]["id"] == "asker"
    assert [a.id for a in await other.find_agents()] == ["on-n0", "on-n1", "other"]
