"""The node's Redis connection owner: the URL forms, one command client shared by
every store, closing, and the key layout of each mode."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.crc import key_slot

from hub.cluster.backplane.redis import RedisBackplane
from hub.cluster.kvstore.redis import RedisKeyValueStore
from hub.cluster.nodestats.redis import RedisNodeStats
from hub.cluster.presence import AgentRecord
from hub.cluster.presence.redis import RedisPresence
from hub.cluster.redis_connection import open_redis
from hub.config.redis_url import parse_redis_url
from hub.config.settings import load_settings
from hub.errors import BackplaneUnavailable
from tests.contract.test_backplane_contract import Recorder, draft
from tests.support.redis_ha import direct_client


def test_url_forms() -> None:
    t = parse_redis_url("redis+sentinel://u:p%40ss@h1:1,h2,[::1]:3/mymaster/2")
    assert (t.mode, t.master, t.db, t.username, t.password) == (
        "sentinel",
        "mymaster",
        2,
        "u",
        "p@ss",
    )
    assert t.hosts == (("h1", 1), ("h2", 26379), ("::1", 3))
    t = parse_redis_url("rediss+sentinel://h:1/m?sentinel_password=s&ssl_cert_reqs=none")
    assert t.tls and t.sentinel_password == "s" and t.tls_options == {"ssl_cert_reqs": "none"}
    t = parse_redis_url("redis+cluster://:secret@a:7000,b")
    assert t.mode == "cluster" and t.hosts == (("a", 7000), ("b", 6379))
    assert t.password == "secret" and t.username is None
    assert parse_redis_url("redis://localhost:6379/0").mode == "single"
    assert parse_redis_url("unix:///tmp/redis.sock").mode == "single"
    for fine in ("redis://h", "redis://h:6379", "redis://:pw@[::1]:6379/15", "rediss://h/0"):
        assert parse_redis_url(fine).mode == "single"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://h:1", "must start with"),
        ("redis+sentinel://h:1", "master's name"),
        ("redis+sentinel://h:1/m/x", "db must be a number"),
        ("redis+sentinel://h:1/m/99999999999", "db must be from 0 to 2147483647"),
        ("redis+sentinel://h:1,/m", "empty entry in the host list"),
        ("redis+cluster://h:1,,h:2", "empty entry in the host list"),
        ("redis+sentinel://h:1/m/0/extra", "nothing more"),
        ("redis+cluster://h:1/0", "takes no path"),
        ("redis+cluster://", "at least one host"),
        ("redis+cluster://h:99999", "no valid port"),
        # One Redis: what redis-py would fail on at connect (a traceback) or
        # ignore (a db that is no number: db 0), found by an outside audit.
        ("redis://127.0.0.1:notaport/0", "no valid port"),
        ("redis://127.0.0.1:99999/0", "no valid port"),
        ("redis://127.0.0.1:0", "no valid port"),
        ("redis://u:p@[::1]:x/0", "no valid port"),
        ("redis://127.0.0.1:6379/abc", "db must be a number"),
        ("rediss://h:6379/1/2", "db must be a number"),
        ("redis+cluster://h:1?sentinel_password=x", "unknown option"),
        ("redis+cluster://h:1?tls=1", "unknown option"),
        ("redis+cluster://h:1?ssl_ca_certs=/ca.pem", r"need the rediss\+cluster"),
        ("rediss+cluster://h:1?ssl_cert_reqs=maybe", "none, optional or required"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_redis_url(url)
    with pytest.raises(Exception, match=says):  # the hub does not start with it
        load_settings({"redis_url": url})


def test_memory_and_unset_open_nothing() -> None:
    assert open_redis(None) is None and open_redis("") is None
    assert open_redis("memory://") is None


async def test_stores_share_one_client_and_never_close_it(connect: Any) -> None:
    redis = connect("redis://127.0.0.1:1/0")
    kv = RedisKeyValueStore(redis)
    stats = RedisNodeStats(redis)
    presence = RedisPresence(redis, node_id="n")
    backplane = RedisBackplane(redis, node_id="n")
    assert kv._client is stats._client is presence._client is backplane._client is redis.client
    for store in (kv, stats, presence, backplane):
        await store.aclose()
    assert not redis.closed  # the owner closes it
    await redis.aclose()
    await redis.aclose()  # idempotent
    assert redis.closed
    with pytest.raises(BackplaneUnavailable):
        await RedisKeyValueStore(redis).get("k")  # a store on a closed connection refuses


@pytest.mark.redis
async def test_one_pool_serves_every_store(redis_server: Any, connect: Any) -> None:
    redis = connect(redis_server.url)
    kv = RedisKeyValueStore(redis, prefix="one")
    presence = RedisPresence(redis, node_id="n", prefix="one")
    await kv.set("k", b"v", 60)
    await presence.claim_agent(AgentRecord("a", "n", "c"))
    client = await direct_client(redis_server.url)
    try:
        listed = {c["name"] for c in await client.client_list()}
        connections = len(await client.client_list()) - 1  # without this one
    finally:
        await client.aclose()
    assert connections <= 2, listed  # one pool, not one per store


@pytest.mark.redis
@pytest.mark.parametrize("mode", ["redis_server", "redis_sentinel", "redis_cluster"])
async def test_space_keys_of_each_mode(mode: str, request: Any, connect: Any) -> None:
    """One Redis and Sentinel: the keys as ever. A cluster: the space's name is
    the hash tag of its keys — its members with its seq, history and epoch,
    in one slot (contract §16) — and an agent's id the tag of its record."""
    setup = request.getfixturevalue(mode)
    redis = connect(setup.url)
    prefix = f"k{mode[6:9]}"
    backplane = RedisBackplane(redis, prefix=prefix, node_id="n")
    presence = RedisPresence(redis, node_id="n", prefix=prefix)
    handler = Recorder()
    await backplane.start(handler)
    await handler.wait_ready(True)
    try:
        await backplane.subscribe("room")
        assert await backplane.publish("room", draft("x")) == 1
        await handler.wait_until(lambda: handler.seqs("room") == [1])
        await presence.touch_node()
        assert await presence.claim_agent(AgentRecord("alice", "n", "c")) is None
        assert await presence.join_space("room", "alice", 10) == 1
        clustered = mode == "redis_cluster"
        space = "{room}" if clustered else "room"
        agent = "{alice}" if clustered else "alice"
        seq_key = f"{prefix}:seq:{space}"
        nodes_key = f"{prefix}:nodes:{{{prefix}}}" if clustered else f"{prefix}:nodes"
        space_keys = [
            seq_key,
            f"{prefix}:history:{space}",
            f"{prefix}:epoch:{space}",
            f"{prefix}:members:{space}",
            f"{prefix}:member-conns:{space}",
        ]
        agent_keys = [f"{prefix}:agent:{agent}", f"{prefix}:member-of:{agent}"]
        for key in (*space_keys, *agent_keys, nodes_key):
            client = await direct_client(setup.url, key)
            try:
                assert await client.exists(key) == 1, key
                if key.startswith(f"{prefix}:epoch") and mode != "redis_server":
                    # Stamped with the master's replication id.
                    info = await client.info("replication")
                    assert (await client.get(key)).decode().endswith(info["master_replid"][:12])
            finally:
                await client.aclose()
        if clustered:
            assert {key_slot(k.encode()) for k in space_keys} == {key_slot(b"room")}
            assert {key_slot(k.encode()) for k in agent_keys} == {key_slot(b"alice")}
    finally:
        await backplane.aclose()
        await presence.aclose()


@pytest.mark.redis
@pytest.mark.parametrize("mode", ["redis_server", "redis_sentinel"])
async def test_an_epoch_from_another_master_makes_live_members_resume(
    mode: str, request: Any, connect: Any
) -> None:
    """As after a failover: the space's epoch was made by another master. The
    node, reconnecting, finds it replaced and says its members must resume —
    where a replica can be promoted; on one Redis nothing changes."""
    setup = request.getfixturevalue(mode)
    prefix = f"s{mode[6:9]}"
    backplane = RedisBackplane(connect(setup.url), prefix=prefix, node_id="n")
    handler = Recorder()
    await backplane.start(handler)
    await handler.wait_ready(True)
    try:
        await backplane.subscribe("room")
        before = await backplane.position("room")  # what a joining member is told
        await backplane.publish("room", draft("x"))
        key = f"{prefix}:epoch:room"
        client = await direct_client(setup.url, key)
        try:
            foreign = before.epoch.rpartition(".")[0] + ".000000000000"
            await client.set(key, foreign if mode != "redis_server" else before.epoch)
        finally:
            await client.aclose()
        conn = backplane._conn
        assert conn is not None
        await conn.disconnect()  # the link drops and reconnects
        await handler.wait_until(lambda: handler.readiness[-2:] == [False, True])
        after = await backplane.position("room")
        if mode == "redis_server":
            assert handler.lost_spaces == [] and after.epoch == before.epoch
        else:
            assert handler.lost_spaces == ["room"]
            assert after.epoch not in (before.epoch, foreign)
            assert after.seq == before.seq + 1  # the seq went on
    finally:
        await backplane.aclose()


@pytest.mark.redis
async def test_a_space_moved_to_another_master_goes_on(redis_cluster: Any, connect: Any) -> None:
    """Resharding moves a space's slot: commands follow MOVED, the node hears
    its sharded subscription end (``sunsubscribe``), resubscribes on the new
    master, and the space's seq and history go on."""
    prefix = "moved"
    backplane = RedisBackplane(connect(redis_cluster.url), prefix=prefix, node_id="n")
    handler = Recorder()
    await backplane.start(handler)
    await handler.wait_ready(True)
    try:
        await backplane.subscribe("room")
        assert await backplane.publish("room", draft("1")) == 1
        await handler.wait_until(lambda: handler.seqs("room") == [1])
        key = f"{prefix}:seq:{{room}}"
        before = redis_cluster.master_of(key)
        other = next(p for p in redis_cluster.masters() if p != before)
        await asyncio.to_thread(redis_cluster.move_slot, key, other)
        assert redis_cluster.master_of(key) == other
        await handler.wait_until(lambda: handler.readiness[-2:] == [False, True])
        assert await backplane.publish("room", draft("2")) == 2
        await handler.wait_until(lambda: handler.seqs("room") == [1, 2])
        history = await backplane.history("room", after=0, limit=10)
        assert [e.seq for e in history.events] == [1, 2]
        assert handler.lost_spaces == []  # same master identity: nothing lost
    finally:
        await backplane.aclose()


@pytest.mark.redis
@pytest.mark.parametrize("mode", ["redis_server", "redis_sentinel", "redis_cluster"])
async def test_a_reconnect_resubscribes_many_spaces(mode: str, request: Any, connect: Any) -> None:
    """Spaces in many hash slots (on a cluster several per master, beside the
    node's own channel) are all subscribed again after the link drops."""
    setup = request.getfixturevalue(mode)
    backplane = RedisBackplane(connect(setup.url), prefix=f"many{mode[6:9]}", node_id="n")
    handler = Recorder()
    await backplane.start(handler)
    await handler.wait_ready(True)
    spaces = [f"s{i}" for i in range(24)]
    try:
        for space in spaces:
            await backplane.subscribe(space)
        conn = backplane._conn
        assert conn is not None
        await conn.disconnect()
        await handler.wait_until(lambda: handler.readiness[-2:] == [False, True])
        for space in spaces:
            assert await backplane.publish(space, draft(space)) == 1
        await handler.wait_until(lambda: all(handler.seqs(s) == [1] for s in spaces))
    finally:
        await backplane.aclose()


@pytest.mark.redis
async def test_a_burst_beyond_the_cluster_connections_waits_for_them(
    redis_cluster: Any, connect: Any
) -> None:
    """redis-py's cluster client refuses a command when its node's connections
    are all busy (``MaxConnectionsError``); the hub's waits, as its one-Redis
    pool does: a connect storm's claims are not refused UNAVAILABLE."""
    redis = connect(redis_cluster.url, max_connections=4)
    presence = RedisPresence(redis, node_id="n", prefix="burst")
    records = [AgentRecord(f"a{i}", "n", f"c{i}") for i in range(200)]
    results = await asyncio.gather(*(presence.claim_agent(r) for r in records))
    assert results == [None] * 200
    # Pipelines too (a members page is one, in the space's slot).
    pages = await asyncio.gather(*(presence.space_members(f"s{i}", 10) for i in range(100)))
    assert pages == [([], 0)] * 100
