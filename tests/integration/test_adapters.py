"""Adapters and virtual members: an echo agent living inside the hub.

The echo agent is a hosted adapter whose virtual member joins a space and
answers every event addressed to it, addressed back to the sender. It goes
through the same path as a WebSocket agent, so seq, order, addressed
delivery, membership events and cluster fan-out hold for it — on one node and
across two nodes on Redis.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hub.adapter_host import AdapterHost, AdapterMember, AgentIdTaken, RequestFailed
from tests.support.wsclient import WsClient

SPACE = "lab"


class EchoAgent:
    """Answers ``{"echo": data, "in_reply_to": event_id}`` to what is addressed to it."""

    system_spaces: tuple[str, ...] = ()

    def __init__(self, agent_id: str = "echo", space: str = SPACE):
        self.agent_id = agent_id
        self.space = space
        self.member: AdapterMember | None = None
        self.seen: list[dict[str, Any]] = []
        self._arrived = asyncio.Event()

    async def wait_seen(self, event_id: str, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while not any(m.get("event_id") == event_id for m in self.seen):
                self._arrived.clear()
                await self._arrived.wait()

    async def start(self, host: AdapterHost) -> None:
        self.member = await host.hosting.attach(
            self.agent_id, self.on_message, type="echo", capabilities=("urn:echo",)
        )
        await self.member.join(self.space)

    async def on_message(self, msg: dict[str, Any]) -> None:
        self.seen.append(msg)
        self._arrived.set()
        if msg.get("type") != "space.event":
            return
        to = msg.get("to")
        if to is None or self.agent_id not in ([to] if isinstance(to, str) else to):
            return
        assert self.member is not None
        await self.member.publish(
            msg["space"],
            {"echo": msg["data"], "in_reply_to": msg["event_id"]},
            to=msg["from"],
        )

    async def aclose(self) -> None:
        if self.member is not None:
            await self.member.aclose()


async def _ask(client: WsClient, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Publish to the echo agent; returns (own echo, the echo agent's reply)."""
    mine = await client.request(
        {"type": "space.publish", "space": SPACE, "data": {"text": text}, "to": "echo"}
    )
    reply = await client.wait_for("space.event", **{"from": "echo"})
    return mine, reply


async def test_echo_agent_answers_on_one_node(hub):
    echo = EchoAgent()
    server = await hub(adapters=[echo])
    alice = await WsClient.connect(server.url, "alice")
    bob = await WsClient.connect(server.url, "bob")
    joined = await alice.join(SPACE)
    assert "echo" in joined["members"]  # the virtual member is a member like any other
    await bob.join(SPACE)
    mine, reply = await _ask(alice, "hello")
    assert mine["to"] == "echo" and mine["from"] == "alice"
    assert reply["to"] == "alice"
    assert reply["data"] == {"echo": mine["data"], "in_reply_to": mine["event_id"], "from": "echo"}
    assert reply["seq"] == mine["seq"] + 1
    # bob, a bystander, got neither of the addressed events, but sees the next one.
    broadcast = await alice.request(
        {"type": "space.publish", "space": SPACE, "data": {"text": "all"}}
    )
    got = await bob.wait_for("space.event")
    assert got["event_id"] == broadcast["event_id"] and got["seq"] == reply["seq"] + 1
    # The echo agent received the broadcast too (not addressed: no reply).
    await echo.wait_seen(broadcast["event_id"])
    await alice.close()
    await bob.close()


async def test_virtual_member_is_an_agent_status_and_leaves_on_shutdown(hub):
    echo = EchoAgent()
    server = await hub(adapters=[echo])
    watcher = await WsClient.connect(server.url, "watcher")
    await watcher.join(SPACE)
    await watcher.join("agent.status")
    # The id is held: a connection with it is refused, like any duplicate.
    dup = await WsClient.connect(server.url, "echo", registered=False)
    code, frames = await dup.closed()
    assert code == 4409 and frames[-1]["code"] == "AGENT_EXISTS"
    await echo.aclose()
    left = await watcher.wait_for("space.members", space=SPACE)
    # Alone: the seed's id; coalesced with the watcher's own join: a list.
    assert left["left"] in ("echo", ["echo"])
    offline = await watcher.wait_for("space.event", space="agent.status")
    assert offline["data"]["event"] == "offline" and offline["data"]["agent"]["id"] == "echo"
    await watcher.close()


async def test_virtual_member_requests_get_the_protocol_errors(hub):
    server = await hub()
    member = await server.node.host.hosting.attach("inner")
    with pytest.raises(RequestFailed) as info:
        await member.publish("nowhere", {"x": 1})
    assert info.value.code == "SPACE_NOT_FOUND"
    await member.join(SPACE)
    with pytest.raises(RequestFailed) as info:
        await member.publish(SPACE, {"x": 1}, to="ghost")
    assert info.value.code == "INVALID_REQUEST"
    with pytest.raises(AgentIdTaken):
        await server.node.host.hosting.attach("inner")
    await member.aclose()


async def test_virtual_member_rate_limit_holds(hub):
    server = await hub(bridge_rate_limit=5, bridge_rate_burst=5)
    member = await server.node.host.hosting.attach("busy")
    await member.join(SPACE)
    results = await asyncio.gather(
        *(member.publish(SPACE, {"n": n}) for n in range(20)), return_exceptions=True
    )
    limited = [r for r in results if isinstance(r, RequestFailed)]
    assert limited and all(r.code == "RATE_LIMITED" for r in limited)
    assert not member.closing  # refused, never closed for it
    await member.aclose()


@pytest.mark.redis
async def test_echo_agent_answers_across_two_nodes(hub, redis_server):
    settings = {"redis_url": redis_server.url, "heartbeat_interval": 0.5, "heartbeat_timeout": 5}
    echo = EchoAgent()
    one = await hub(adapters=[echo], **settings)
    two = await hub(**settings)
    alice = await WsClient.connect(two.url, "alice")  # on the node without the agent
    carol = await WsClient.connect(two.url, "carol")
    joined = await alice.join(SPACE)
    assert "echo" in joined["members"]  # cluster-wide membership
    await carol.join(SPACE)
    mine, reply = await _ask(alice, "across")
    assert reply["data"]["in_reply_to"] == mine["event_id"] and reply["seq"] == mine["seq"] + 1
    # Addressed delivery held on the remote node too: carol got nothing so far.
    nxt = await alice.request({"type": "space.publish", "space": SPACE, "data": {"n": 2}})
    got = await carol.wait_for("space.event")
    assert got["event_id"] == nxt["event_id"]
    # The agent id is claimed cluster-wide.
    dup = await WsClient.connect(two.url, "echo", registered=False)
    code, _ = await dup.closed()
    assert code == 4409
    await alice.close()
    await carol.close()
    assert one.node.ready


async def test_a_virtual_member_is_never_silent(hub):
    """It sends no heartbeats: a duplicate must still find it alive after the timeout."""
    server = await hub(heartbeat_interval=0.1, heartbeat_timeout=0.3)
    member = await server.node.host.hosting.attach("quiet")
    await asyncio.sleep(0.6)  # past the heartbeat timeout on purpose: nothing to wait on
    dup = await WsClient.connect(server.url, "quiet", registered=False)
    code, _ = await dup.closed()
    assert code == 4409
    assert not member.closing
    await member.aclose()


@pytest.mark.redis
async def test_a_shared_member_keeps_its_membership_when_one_copy_fails_or_leaves(
    hub, redis_server
):
    settings = {"redis_url": redis_server.url, "heartbeat_interval": 0.5, "heartbeat_timeout": 5}
    one = await hub(**settings)
    two = await hub(**settings)
    first = await one.node.host.hosting.attach("relay", shared=True)
    second = await two.node.host.hosting.attach("relay", shared=True)
    await first.join(SPACE)
    await second.join(SPACE)
    await second.leave(SPACE)  # one node's copy leaves: the space keeps its member
    asker = await WsClient.connect(two.url, "asker")
    joined = await asker.join(SPACE)
    assert "relay" in joined["members"]
    ev = await asker.request(
        {"type": "space.publish", "space": SPACE, "to": "relay", "data": {"q": 1}}
    )
    assert ev["to"] == "relay"  # still addressable: a member cluster-wide
    await first.aclose()
    await second.aclose()
    await asker.close()


class Streamer:
    """Records what reaches a virtual member that publishes a stream."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()

    async def on_message(self, msg: dict[str, Any]) -> None:
        self.seen.append(msg)
        self.arrived.set()

    async def notice(self, timeout: float = 10.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while True:
                for msg in self.seen:
                    if msg.get("type") == "space.event.cancel":
                        return msg
                self.arrived.clear()
                await self.arrived.wait()


async def _receiver_cancel_reaches_the_bridge(publisher_node: Any, receiver_node: Any) -> None:
    streamer = Streamer()
    member = await publisher_node.node.host.hosting.attach("streamer", streamer.on_message)
    await member.join(SPACE)
    bob = await WsClient.connect(receiver_node.url, "bob")
    await bob.join(SPACE)
    await member.send(
        {"type": "space.event.delta", "space": SPACE, "event_id": "s1", "data": {"text": "a"}}
    )
    first = await bob.wait_for("space.event.delta")
    stopped = await bob.request(
        {"type": "space.event.cancel", "space": SPACE, "event_id": first["event_id"]}
    )
    assert stopped["reason"] == "receiver_cancelled"
    notice = await streamer.notice()
    assert notice == {
        "type": "space.event.cancel",
        "space": SPACE,
        "event_id": "streamer/s1",
        "from": "bob",
        "timestamp": notice["timestamp"],
        "reason": "receiver_cancelled",
    }
    # The stream goes on for anyone else; bob gets no more of it.
    await member.send(
        {"type": "space.event.delta", "space": SPACE, "event_id": "s1", "data": {"text": "b"}}
    )
    ping = await bob.request({"type": "space.publish", "space": SPACE, "data": {"n": 1}})
    assert ping["type"] == "space.event"
    assert not [m for m in bob.backlog if m.get("type") == "space.event.delta"]
    await bob.close()
    await member.aclose()


async def test_a_receivers_cancel_reaches_a_bridge_publishing_the_stream(hub):
    server = await hub()
    await _receiver_cancel_reaches_the_bridge(server, server)


@pytest.mark.redis
async def test_a_receivers_cancel_reaches_a_bridge_on_another_node(hub, redis_server):
    settings = {"redis_url": redis_server.url, "heartbeat_interval": 0.5, "heartbeat_timeout": 5}
    one = await hub(**settings)
    two = await hub(**settings)
    await _receiver_cancel_reaches_the_bridge(one, two)
