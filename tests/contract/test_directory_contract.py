"""Paged reads of presence, the same bodies in memory and on Redis: a space's
members (``space.members`` requests) and the agent directory (``agent.list``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hub.cluster.presence import CapabilityFilter, InvalidQuery, ReapedAgent
from hub.cluster.presence.base import MAX_PREFIX_CAPABILITIES
from tests.contract.test_presence_contract import PresenceCluster, rec


@pytest.fixture
async def cluster(backend: Any) -> AsyncIterator[PresenceCluster]:
    c = PresenceCluster(None if backend is None else backend.url)
    yield c
    await c.aclose()


def cap(text: str) -> CapabilityFilter:
    return CapabilityFilter.parse(text)


async def all_members(p, space: str, limit: int) -> list[str]:
    out, cursor = [], None
    while True:
        page = await p.members_page(space, cursor, limit)
        assert len(page.members) <= limit
        out += page.members
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


async def all_agents(p, limit: int, **filters) -> list[str]:
    out, cursor = [], None
    filters.setdefault("capability", None)
    filters.setdefault("space", None)
    for _ in range(1000):
        page = await p.list_agents(cursor=cursor, limit=limit, **filters)
        assert len(page.agents) <= limit
        out += [r.agent_id for r in page.agents]
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor
    raise AssertionError("paging never ended")


# ── space.members pages ────────────────────────────────────────────────────


async def test_members_pages_in_join_order_with_exact_count(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    ids = [f"m{i:02d}" for i in range(25)][::-1]  # join order is not id order
    for i, aid in enumerate(ids):
        await (a if i % 2 else b).join_space("room", aid, 100)
    first = await a.members_page("room", None, 10)
    assert first.members == ids[:10] and first.count == 25 and first.next_cursor
    assert await all_members(b, "room", 10) == ids
    assert await all_members(b, "room", 25) == ids
    last = await b.members_page("room", None, 25)
    assert last.next_cursor is None  # exactly one page: no empty page after it
    assert await all_members(a, "room", 1) == ids
    empty = await a.members_page("nowhere", None, 10)
    assert (empty.members, empty.count, empty.next_cursor) == ([], 0, None)


async def test_members_paging_is_stable_under_joins_and_leaves(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    for i in range(30):
        await a.join_space("room", f"m{i}", 100)
    page = await b.members_page("room", None, 10)
    assert page.members == [f"m{i}" for i in range(10)]
    # Meanwhile: someone already listed leaves, someone not yet listed leaves,
    # newcomers join, and a listed member leaves and rejoins (goes to the end).
    await a.leave_space("room", "m3")
    await a.leave_space("room", "m15")
    await b.join_space("room", "late-1", 100)
    await a.leave_space("room", "m5")
    await a.join_space("room", "m5", 100)
    rest = []
    cursor = page.next_cursor
    while cursor is not None:
        page = await a.members_page("room", cursor, 10)
        rest += page.members
        cursor = page.next_cursor
    assert rest == [f"m{i}" for i in range(10, 30) if i != 15] + ["late-1", "m5"]
    assert page.count == 29


async def test_members_page_refuses_a_foreign_cursor(cluster: PresenceCluster) -> None:
    a = await cluster.node("a")
    await a.join_space("room", "x", 10)
    for bad in ("abc", "-1", "1.5", "٣", "9" * 40):
        with pytest.raises(InvalidQuery):
            await a.members_page("room", bad, 10)


# ── agent.list ─────────────────────────────────────────────────────────────


async def test_directory_lists_every_agent_by_id_with_details(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    x = rec("x", "a", "ws-x", type="llm", capabilities=("chat",), metadata={"v": 1},
            connected_at=1_700_000_000_123)  # fmt: skip
    await a.claim_agent(x)
    for i in range(12):
        await (a if i % 2 else b).claim_agent(rec(f"agent-{i:02d}", "ab"[i % 2], f"ws-{i}"))
    page = await b.list_agents(capability=None, space=None, cursor=None, limit=100)
    assert page.next_cursor is None
    assert [r.agent_id for r in page.agents] == [f"agent-{i:02d}" for i in range(12)] + ["x"]
    assert page.agents[-1] == x
    assert x.directory() == {
        "id": "x", "type": "llm", "capabilities": ["chat"], "metadata": {"v": 1},
        "node": "a", "connected_at": 1_700_000_000_123,
    }  # fmt: skip
    assert await all_agents(a, 5) == [r.agent_id for r in page.agents]
    await a.release_agent("agent-03", "ws-3")
    assert "agent-03" not in await all_agents(b, 4)


async def test_directory_by_exact_capability_and_by_prefix(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    caps = {
        "w1": ("https://ex.org/weather", "chat"),
        "w2": ("https://ex.org/weather/v2",),
        "w3": ("https://ex.org/weather", "https://ex.org/weather/v2", "https://ex.org/x"),
        "c1": ("chat",),
        "n1": (),
    }
    for i, (aid, c) in enumerate(caps.items()):
        await (a, b)[i % 2].claim_agent(rec(aid, "ab"[i % 2], f"ws-{aid}", capabilities=c))
    weather = cap("https://ex.org/weather")
    assert await all_agents(a, 10, capability=weather) == ["w1", "w3"]
    assert await all_agents(a, 10, capability=cap("chat")) == ["c1", "w1"]
    # A prefix: every agent once, in id order, across pages of any size.
    for limit in (1, 2, 10):
        assert await all_agents(b, limit, capability=cap("https://ex.org/*")) == ["w1", "w2", "w3"]
    assert await all_agents(b, 10, capability=cap("https://ex.org/weather/*")) == ["w2", "w3"]
    assert await all_agents(b, 10, capability=cap("*")) == ["c1", "w1", "w2", "w3"]
    assert await all_agents(b, 10, capability=cap("nothing")) == []
    assert await all_agents(b, 10, capability=cap("nothing*")) == []
    # The index follows updates, replacement and release.
    await a.update_agent(rec("w1", "a", "ws-w1", capabilities=("chat",)))
    assert await all_agents(b, 10, capability=weather) == ["w3"]
    assert await b.claim_agent(rec("w3", "b", "ws-new"), replace="ws-w3") is None
    assert await all_agents(a, 10, capability=weather) == []
    assert await all_agents(a, 10, capability=cap("https://*")) == ["w2"]
    await a.release_agent("w2", "ws-w2")
    assert await all_agents(a, 10, capability=cap("https://*")) == []
    assert await all_agents(a, 10) == ["c1", "n1", "w1", "w3"]


async def test_directory_by_space_in_join_order(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    for aid, c in (("z", ("chat",)), ("y", ()), ("x", ("chat", "code"))):
        await a.claim_agent(rec(aid, "a", f"ws-{aid}", capabilities=c))
        await b.join_space("room", aid, 10)
    await b.join_space("room", "no-record", 10)  # a member without a directory entry
    assert await all_agents(a, 10, space="room") == ["z", "y", "x"]
    assert await all_agents(a, 1, space="room") == ["z", "y", "x"]
    assert await all_agents(a, 2, space="room", capability=cap("chat")) == ["z", "x"]
    assert await all_agents(a, 10, space="room", capability=cap("co*")) == ["x"]
    assert await all_agents(a, 10, space="elsewhere") == []


async def test_directory_refuses_bad_cursors_and_too_broad_prefixes(
    cluster: PresenceCluster,
) -> None:
    a = await cluster.node("a")
    with pytest.raises(InvalidQuery):
        await a.list_agents(capability=None, space=None, cursor="not an id!", limit=10)
    with pytest.raises(InvalidQuery):
        await a.list_agents(capability=None, space="room", cursor="x", limit=10)
    many = tuple(f"cap/{i:04d}" for i in range(MAX_PREFIX_CAPABILITIES + 1))
    await a.claim_agent(rec("hoarder", "a", "ws-h", capabilities=many[:256]))
    await a.claim_agent(rec("hoarder2", "a", "ws-h2", capabilities=many[256:512]))
    await a.claim_agent(rec("hoarder3", "a", "ws-h3", capabilities=many[512:768]))
    await a.claim_agent(rec("hoarder4", "a", "ws-h4", capabilities=many[768:]))
    with pytest.raises(InvalidQuery):
        await a.list_agents(capability=cap("cap/*"), space=None, cursor=None, limit=10)
    page = await a.list_agents(capability=cap("cap/09*"), space=None, cursor=None, limit=10)
    assert [r.agent_id for r in page.agents] == ["hoarder4"]


async def test_directory_after_reaping_and_restore(cluster: PresenceCluster) -> None:
    dead, live = await cluster.node("dead"), await cluster.node("live")
    await dead.touch_node()
    await dead.claim_agent(rec("gone", "dead", "ws-g", capabilities=("chat",)))
    await live.claim_agent(rec("stays", "live", "ws-s", capabilities=("chat",)))
    await asyncio.sleep(0.5)
    await live.touch_node()
    reaped = await live.reap_dead_nodes(0.2)
    if cluster.distributed:
        assert [r.record.agent_id for r in reaped] == ["gone"]
        assert await all_agents(live, 10, capability=cap("chat")) == ["stays"]
        assert await all_agents(live, 10) == ["stays"]
        await cluster.lose_data()
        assert await live.touch_node() is True
        restored = rec("stays", "live", "ws-s", capabilities=("chat",))
        assert await live.restore([restored], {}) == []
        assert await all_agents(dead, 10, capability=cap("ch*")) == ["stays"]
    else:
        assert reaped == [] or isinstance(reaped[0], ReapedAgent)


async def test_node_liveness(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await a.touch_node()
    assert await b.node_alive("a", 5.0) is True
    if cluster.distributed:
        assert await b.node_alive("never-seen", 5.0) is False
        await asyncio.sleep(0.3)
        assert await b.node_alive("a", 0.1) is False
        await a.leave_cluster()
        assert await b.node_alive("a", 60.0) is False
