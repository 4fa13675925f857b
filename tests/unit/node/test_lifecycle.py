"""hub.node.lifecycle: one WebSocket connection, from accepted to cleaned up.

A real Node (memory stores, FlakyPresence to make Redis fail or wait) runs
each connection of a loopback listener (hub.net.listener) through
``ConnectionLifecycle.handle``; websockets' own client is the agent. What its
docstring promises: authenticated, the id claimed cluster-wide, announced,
every frame dispatched, then cleaned up and released; a refusal is an
``error`` event and a close code, never half a registration; one log line when
a connection opens (or is refused) and one when it closes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import orjson
import pytest
import structlog
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from hub.config.settings import load_settings
from hub.net.connection import ConnectionContext, HubConnection
from hub.net.handshake import ConnectionsPerIp, HandshakeDeadlines, HandshakeSlots
from hub.net.listener import listen
from hub.net.outbox import Flusher
from hub.node.node import Node
from tests.support.handlers import FlakyPresence

WAIT = 10.0


class Hub:
    """A node, a listener running its connections, and what was logged."""

    def __init__(self, node: Node, port: int, logs: list[dict[str, Any]]) -> None:
        self.node = node
        self.port = port
        self.logs = logs
        self.presence: FlakyPresence = node.presence  # type: ignore[assignment]

    def url(self, agent_id: str, token: str | None = None) -> str:
        query = f"agent_id={agent_id}" + (f"&token={token}" if token else "")
        return f"ws://127.0.0.1:{self.port}/ws?{query}"

    def lines(self, event: str) -> list[dict[str, Any]]:
        return [line for line in self.logs if line["event"] == event]

    async def lines_until(self, event: str, count: int = 1) -> list[dict[str, Any]]:
        await until(lambda: len(self.lines(event)) >= count)
        return self.lines(event)


async def until(predicate: Callable[[], bool]) -> None:
    """Let the event loop run until ``predicate()`` holds (at most ``WAIT`` s)."""
    for _ in range(int(WAIT / 0.005)):
        if predicate():
            return
        await asyncio.sleep(0.005)
    assert predicate(), "not reached"


def process_request(conn: HubConnection, request: Any) -> None:
    """The handshake's part the lifecycle relies on: the agent id and its token."""
    query = parse_qs(request.path.partition("?")[2])
    conn.agent_id = query["agent_id"][0]
    conn.token = query.get("token", [None])[0]


@pytest.fixture
async def make_hub() -> AsyncIterator[Callable[..., Any]]:
    cleanup: list[Callable[[], Any]] = []
    capture = structlog.testing.capture_logs()
    logs = capture.__enter__()

    async def start(**settings: Any) -> Hub:
        node = Node(load_settings({"node_id": "n1", **settings}), presence=FlakyPresence())
        await node.start()
        loop = asyncio.get_running_loop()
        context = ConnectionContext(
            flusher=Flusher(loop), counters=node.counters, handshakes=HandshakeSlots(10),
            deadlines=HandshakeDeadlines(30.0, loop), per_ip=ConnectionsPerIp(0),
            handler=node.lifecycle.handle, process_request=process_request, close_timeout=2.0,
        )  # fmt: skip
        server = listen(
            context, "127.0.0.1", 0, logger=logging.getLogger("websockets.server"),
            max_size=65536, compression=False, backlog=16,
        )  # fmt: skip
        await server

        async def stop() -> None:
            server.close()
            await asyncio.wait_for(server.wait_closed(), WAIT)
            await node.aclose()

        cleanup.append(stop)
        return Hub(node, server.sockets[0].getsockname()[1], logs)

    try:
        yield start
    finally:
        for stop in cleanup:
            await stop()
        capture.__exit__(None, None, None)


async def next_message(ws: ClientConnection) -> dict[str, Any]:
    return orjson.loads(await asyncio.wait_for(ws.recv(), WAIT))


async def refusal(url: str) -> tuple[dict[str, Any], int | None]:
    """The error event a refused connection gets, and its close code."""
    async with connect(url) as ws:
        error = await next_message(ws)
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), WAIT)
        return error, ws.close_code


async def test_an_admitted_connection_is_registered_dispatched_and_cleaned_up(
    make_hub: Any,
) -> None:
    hub = await make_hub(heartbeat_interval=20, heartbeat_timeout=50)
    async with connect(hub.url("alice")) as ws:
        registered = await next_message(ws)
        assert registered["type"] == "agent.registered"
        assert registered["agent"]["id"] == "alice"
        assert (registered["heartbeat_interval"], registered["heartbeat_timeout"]) == (20000, 50000)
        conn_id = registered["agent"]["connection_id"]
        record = await hub.presence.get_agent("alice")
        assert record is not None and (record.node_id, record.connection_id) == ("n1", conn_id)
        assert set(hub.node.registry.connections) == {conn_id}

        await ws.send(orjson.dumps({"type": "space.join", "id": "j", "space": "room"}).decode())
        assert (await next_message(ws))["type"] == "space.joined", "frames are dispatched"
        (opened,) = hub.lines("connection opened")
        assert opened["agent_id"] == "alice" and opened["connection_id"] == conn_id
        assert opened["remote"].startswith("127.0.0.1:")

    (closed,) = await hub.lines_until("connection closed")
    assert closed["close_code"] == 1000 and closed["messages_in"] == 1
    assert closed["messages_out"] >= 2  # registered, joined (and its own join event)
    assert await hub.presence.get_agent("alice") is None, "released cluster-wide"
    assert not hub.node.registry.connections and not hub.node.registry.members("room")
    assert hub.lines("connection refused") == []


async def test_a_client_gone_without_a_close_is_logged_with_the_number_1006(
    make_hub: Any,
) -> None:
    """Not websockets' enum: a console log would print its repr."""
    hub = await make_hub()
    async with connect(hub.url("alice")) as ws:
        await next_message(ws)
        ws.transport.abort()
    (closed,) = await hub.lines_until("connection closed")
    assert type(closed["close_code"]) is int and closed["close_code"] == 1006


async def test_a_bad_token_is_refused_4401_and_nothing_is_registered(
    make_hub: Any, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"alice": "s3cret"}))
    hub = await make_hub(auth_mode="tokens", auth_tokens_file=str(tokens))
    error, code = await refusal(hub.url("alice", "wrong"))
    assert error["type"] == "error" and error["code"] == "UNAUTHORIZED" and code == 4401
    assert "claim_agent" not in hub.presence.switches.calls, "never claimed"
    (refused,) = await hub.lines_until("connection refused")
    assert refused["reason"] == "unauthorized" and hub.lines("connection opened") == []
    async with connect(hub.url("alice", "s3cret")) as ws:
        assert (await next_message(ws))["type"] == "agent.registered"


async def test_a_reserved_agent_id_is_refused_4409(make_hub: Any) -> None:
    hub = await make_hub(api_key="k" * 32)  # the server API's sender is the hub's own
    (reserved, *_) = sorted(hub.node.reserved_ids)
    error, code = await refusal(hub.url(reserved))
    assert error["code"] == "AGENT_EXISTS" and "the hub's own" in error["message"]
    assert code == 4409 and "claim_agent" not in hub.presence.switches.calls


async def test_an_id_a_live_connection_holds_is_refused_4409(make_hub: Any) -> None:
    hub = await make_hub()
    async with connect(hub.url("alice")) as first:
        held = (await next_message(first))["agent"]["connection_id"]
        error, code = await refusal(hub.url("alice"))
        assert error["code"] == "AGENT_EXISTS" and "already connected" in error["message"]
        assert code == 4409
        record = await hub.presence.get_agent("alice")
        assert record is not None and record.connection_id == held, "the holder keeps it"
        await first.send('{"type":"space.join","id":"j","space":"room"}')
        assert (await next_message(first))["type"] == "space.joined"
    assert (await hub.lines_until("connection refused"))[0]["reason"] == "agent exists"


async def test_an_unreachable_presence_at_the_claim_is_refused_1013(make_hub: Any) -> None:
    hub = await make_hub()
    hub.presence.switches.fail.add("claim_agent")
    error, code = await refusal(hub.url("alice"))
    assert error["code"] == "UNAVAILABLE" and code == 1013
    assert not hub.node.registry.connections
    hub.presence.switches.fail.clear()
    async with connect(hub.url("alice")) as ws:
        assert (await next_message(ws))["type"] == "agent.registered", "try again later: works"


async def test_a_client_gone_during_the_claim_is_never_announced(make_hub: Any) -> None:
    hub = await make_hub()
    gate = hub.presence.switches.hold("claim_agent")
    ws = await connect(hub.url("alice"))
    await asyncio.wait_for(hub.presence.switches.reached("claim_agent"), WAIT)
    (conn,) = hub.node.registry.connections.values()  # added before the claim
    ws.transport.abort()  # gone while its id is being claimed
    await until(lambda: conn.closing)  # the hub has seen the socket go
    gate.set()
    (refused,) = await hub.lines_until("connection refused")
    assert refused["reason"] == "client gone during the claim"
    assert await hub.presence.get_agent("alice") is None, "claimed, then released"
    assert not hub.node.registry.connections and hub.lines("connection opened") == []
    assert "update_agent" not in hub.presence.switches.calls
