"""In-process nodes on a real redis-server: prefixes, and what an outage refuses."""

import asyncio

import pytest

from tests.support.wsclient import WsClient

pytestmark = pytest.mark.redis

FAST = {"heartbeat_interval": 0.5, "heartbeat_timeout": 5.0}


async def wait_until(predicate, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 - the node's state, no event to wait on
            await asyncio.sleep(0.05)


async def test_prefixes_keep_hubs_apart_on_one_redis(hub, redis_server):
    one = await hub(redis_url=redis_server.url, redis_prefix="one", **FAST)
    two = await hub(redis_url=redis_server.url, redis_prefix="two", **FAST)
    a = await WsClient.connect(one.url, "same-id")
    b = await WsClient.connect(two.url, "same-id")  # no AGENT_EXISTS: another hub
    await a.join("general")
    joined = await b.join("general")
    assert joined["members"] == ["same-id"] and joined["member_count"] == 1
    await a.request({"type": "space.publish", "space": "general", "data": {"hub": 1}})
    echo = await b.request({"type": "space.publish", "space": "general", "data": {"hub": 2}})
    assert echo["seq"] == 1  # its own sequence: the other hub's publish is not in it
    assert not [m for m in b.backlog if m.get("data", {}).get("hub") == 1]
    await a.close()
    await b.close()


async def test_outage_refuses_what_needs_the_cluster(hub, redis_server):
    node = await hub(redis_url=redis_server.url, **FAST)
    c = await WsClient.connect(node.url, "alice", heartbeat=True)
    await c.join("general")
    redis_server.kill()
    await wait_until(lambda: not node.node.ready)
    for msg in (
        {"type": "space.join", "space": "other"},
        {"type": "space.publish", "space": "general", "data": {}},
        {"type": "space.list"},
        {"type": "space.leave", "space": "general"},
    ):
        err = await c.request(msg, timeout=20)
        assert err["type"] == "error" and err["code"] == "UNAVAILABLE", (msg, err)
        assert "not carried out" in err["message"]
    late = await WsClient.connect(node.url, "bob", registered=False)
    code, frames = await late.closed(timeout=20)
    assert code == 1013 and frames[-1]["code"] == "UNAVAILABLE"
    assert c.ws.close_code is None  # the open connection survived all of it

    redis_server.start()
    await wait_until(lambda: node.node.ready)
    # The refused leave changed nothing: alice is still a member, and can leave now.
    listing = await c.request({"type": "space.list"})
    assert {"id": "general", "type": "public", "member_count": 1} in listing["spaces"]
    assert (await c.request({"type": "space.leave", "space": "general"}))["type"] == "space.left"
    assert (await c.join("other"))["member_count"] == 1
    await c.close()
