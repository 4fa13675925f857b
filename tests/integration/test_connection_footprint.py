"""What an open, idle connection keeps (docs/operations.md, "Connections at
scale"): the hub's state in slots so websockets' instance dict keeps its
shared keys, the handshake's headers emptied, no deque for drain waiters."""

from __future__ import annotations

import asyncio
import gc
import sys
import weakref

from hub.net.connection import HubConnection

HUB_ATTRIBUTES = set(HubConnection.__slots__)


async def test_an_open_connection_keeps_a_small_instance_dict(hub, clients):
    server = await hub()
    alice = await clients(server, "alice")
    await alice.join("room")
    (conn,) = server._server.connections
    assert isinstance(conn, HubConnection)
    assert conn.session is not None and conn.record is not None
    state = vars(conn)
    assert not HUB_ATTRIBUTES & set(state), "hub state belongs in slots"
    # CPython shares one key table per class up to 30 attributes; past that
    # every instance gets its own (about 1.4 KiB).
    assert len(state) <= 30
    assert sys.getsizeof(state) < 600
    # The handshake's request and answer are let go once it is over (an empty
    # request, shared by all connections, tells websockets it is over).
    assert len(conn.request.headers) == 0 and conn.request.path == ""
    assert conn.response is None
    assert conn.drain_waiters == []


async def test_the_per_ip_slot_is_given_back_when_the_connection_ends(hub, clients):
    server = await hub(max_connections_per_ip=1)
    alice = await clients(server, "alice")
    assert len(server.per_ip) == 1
    (conn,) = server._server.connections
    assert conn.holds_ip_slot
    await alice.aclose()
    await conn.wait_closed()
    assert len(server.per_ip) == 0
    bob = await clients(server, "bob")
    assert bob is not None


async def test_a_closed_connection_is_freed_by_reference_counting(hub, clients):
    """Nothing of a closed connection waits for the cycle collector: in a storm
    that would be every dropped agent's objects at once (websockets leaves its
    protocol in cycles; the hub breaks them when the connection is lost)."""
    server = await hub()
    alice = await clients(server, "alice")
    await alice.join("room")
    (conn,) = server._server.connections
    freed = asyncio.Event()
    ref = weakref.ref(conn, lambda _: freed.set())
    cleaned_up = conn.cleaned_up
    del conn
    gc.disable()
    try:
        await alice.aclose()
        await asyncio.wait_for(cleaned_up.wait(), 10)
        await asyncio.wait_for(freed.wait(), 10)
    finally:
        gc.enable()
    assert ref() is None
