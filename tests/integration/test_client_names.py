"""One meaning per name across the SDKs (contract §19), and the old Python names.

``events()`` yields whole events — a publish the hub chunked is still one event
(it used to be left out); ``members()`` is the paged call and ``known_members()``
the cached list; ``close()`` closes. The renamed methods keep working for one
release and say so with a DeprecationWarning.
"""

from __future__ import annotations

import warnings

import pytest

from agora_client import AssembledEvent, Event, HubAPI, MembersPage
from tests.support.sdk_clients import members_of

TIMEOUT = 10.0


async def test_events_yields_a_publish_the_hub_chunked_as_one_event(hub, clients):
    server = await hub(stream_threshold=1024, stream_chunk=512)
    a, b = await members_of(server, clients, "s", "alice", "bob")
    seen = b.events("s")
    await a.publish("s", "small")
    await a.publish("s", "x" * 5000)  # over stream_threshold: delivered as deltas
    await a.publish("s", "small again")
    got = [await seen.get(TIMEOUT) for _ in range(3)]
    assert [type(e) for e in got] == [Event, AssembledEvent, Event]
    assert got[1].text == "x" * 5000 and got[1].complete and got[1].sender == "alice"
    assert all(e.complete and e.status == "complete" for e in got)
    assert [e.text for e in (got[0], got[2])] == ["small", "small again"]


async def test_members_is_the_paged_call_and_known_members_the_cached_list(hub, clients):
    server = await hub()
    # bob joined last: his join's answer listed both (alice hears of bob later).
    a, b = await members_of(server, clients, "room", "alice", "bob")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither new name warns
        page = await a.members("room", limit=1)
        assert isinstance(page, MembersPage) and page.members == ["alice"]
        assert (await a.members("room", cursor=page.next_cursor)).members == ["bob"]
        assert b.known_members("room") == ["alice", "bob"]
        assert await a.all_members("room") == ["alice", "bob"]


async def test_the_old_names_work_and_warn(hub, clients):
    server = await hub()
    a, b = await members_of(server, clients, "room", "alice", "bob")
    with pytest.warns(DeprecationWarning, match=r"space_members\(\) is deprecated.*members\(\)"):
        page = await a.space_members("room", limit=1)
    assert page.members == ["alice"] and page.member_count == 2

    # members(space) was the cached list: used as one, it still is, and says what to use.
    with pytest.warns(DeprecationWarning, match=r"known_members\('room'\)") as caught:
        assert b.members("room") == ["alice", "bob"]
    assert caught[0].filename == __file__  # pointed at the caller's line
    with pytest.warns(DeprecationWarning):
        assert "bob" in b.members("room")
    with pytest.warns(DeprecationWarning):
        assert list(b.members("room")) == ["alice", "bob"] and len(b.members("room")) == 2
    with pytest.warns(DeprecationWarning):
        assert b.members("room")[0] == "alice"
    with pytest.warns(DeprecationWarning):
        assert not a.members("not-joined")  # was None: still falsy


async def test_close_everywhere_and_aclose_kept_without_a_warning(hub, clients):
    server = await hub(api_key="k" * 32)
    a = await clients(server, "alice")
    b = await clients(server, "bob")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await a.close()
        await b.aclose()  # contextlib.aclosing's name: an alias, not deprecated
        api = HubAPI(server.http_url, "k" * 32)
        await api.spaces()
        await api.close()
        await api.aclose()  # idempotent
    assert not a.connected and not b.connected
