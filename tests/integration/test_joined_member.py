"""adapters.kit.joined: the inbound gateways' shared member, on a real hub.

The HTTP Agora, A2A and MCP gateways publish through it; here it is driven
directly: it joins a space again when its membership was lost behind its
back, says which refusals are the join's, and joins nothing while the node is
not ready — the served spaces are joined once it is.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.kit.joined import JoiningMember, JoinRefused, NodeNotReady
from hub.adapter_host import RequestFailed

SPACE = "lab"


async def _ignore(_msg: dict[str, Any]) -> None:
    return None


async def wait_until(predicate: Any, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 - the node's state, no event to wait on
            await asyncio.sleep(0.05)


async def test_a_publish_after_the_membership_was_lost_joins_again_once(hub):
    server = await hub()
    joining = JoiningMember("gw", [SPACE], capabilities=("test",), label="test gateway")
    await joining.start(server.node.host.hosting, _ignore)
    try:
        assert joining.member is not None and set(joining.member.session.spaces) == {SPACE}
        await joining.member.leave(SPACE)  # lost behind its back (Redis flushed, say)
        with pytest.raises(RequestFailed, match="UNAUTHORIZED"):
            await joining.member.publish(SPACE, {"n": 0})
        published = await joining.publish(SPACE, {"n": 1})
        assert published["type"] == "space.published" and published["space"] == SPACE
        assert set(joining.member.session.spaces) == {SPACE}
    finally:
        await joining.aclose()


async def test_a_refused_join_is_told_apart_from_a_refused_publish(hub):
    server = await hub()
    joining = JoiningMember("gw", [SPACE], capabilities=("test",), label="test gateway")
    await joining.start(server.node.host.hosting, _ignore)
    try:
        with pytest.raises(JoinRefused) as refused:
            await joining.publish("no such name!", {"n": 1})
        assert refused.value.code == "INVALID_REQUEST"
        with pytest.raises(RequestFailed) as failed:
            await joining.publish(SPACE, {"n": 1}, to="ghost")  # not a member: the publish's
        assert failed.value.code == "INVALID_REQUEST" and not isinstance(failed.value, JoinRefused)
    finally:
        await joining.aclose()


@pytest.mark.redis
async def test_nothing_is_joined_while_the_node_is_not_ready(hub, redis_server):
    server = await hub(redis_url=redis_server.url, heartbeat_interval=0.3, heartbeat_timeout=5)
    redis_server.kill()
    await wait_until(lambda: not server.node.ready)
    joining = JoiningMember("gw", [SPACE], capabilities=("test",), label="test gateway")
    await joining.start(server.node.host.hosting, _ignore)
    try:
        assert joining.member is not None and not joining.member.session.spaces
        with pytest.raises(NodeNotReady):
            await joining.publish(SPACE, {"n": 1})
        redis_server.start()
        await wait_until(lambda: SPACE in joining.member.session.spaces)  # in the background
        published = await joining.publish(SPACE, {"n": 2})
        assert published["type"] == "space.published"
    finally:
        await joining.aclose()
