"""The sweep's end of relayed streams whose publisher is gone from the cluster."""

from __future__ import annotations

import time

import orjson
import structlog

from hub.cluster.presence import AgentRecord, MemoryPresence
from hub.config.settings import Settings
from hub.core.frames import OutFrame
from hub.core.registry import Registry
from hub.core.stream_audiences import StreamOp
from hub.node.sweep import Sweeper
from tests.unit.core.test_registry import Recorder

QUIET = 5.0


class NoSessions:
    """The dispatcher: the recorders have no sessions, so nothing is run."""

    async def run(self, *_: object) -> None:
        raise AssertionError("no session to act for")


# node_dead_after below: min(node_heartbeat_timeout, heartbeat_timeout)


async def sweeper_with_a_relayed_stream(
    publisher: str,
) -> tuple[Sweeper, Recorder, MemoryPresence, Registry[Recorder]]:
    settings = Settings(node_heartbeat_timeout=QUIET, stream_idle_timeout=300.0)
    registry: Registry[Recorder] = Registry()
    receiver = Recorder("receiver")
    receiver.session = None  # type: ignore[attr-defined]  # a member without a session
    registry.add("conn-r", receiver)
    registry.bind_agent(receiver)
    registry.join("room", receiver)
    presence = MemoryPresence()
    await presence.claim_agent(AgentRecord(publisher, "other-node", "ws-p"))
    first = OutFrame(b'{"type":"space.event.delta"}')
    registry.deliver("room", first, stream=f"{publisher}/s", op=StreamOp.OPEN, now=100.0)
    sweeper = Sweeper(
        settings, registry, NoSessions(),  # type: ignore[arg-type]
        preframe=False, log=structlog.get_logger(), claims=presence,
    )  # fmt: skip
    return sweeper, receiver, presence, registry


async def test_a_quiet_stream_of_a_publisher_still_there_goes_on():
    sweeper, receiver, _, registry = await sweeper_with_a_relayed_stream("alice")
    await sweeper.sweep(100.0 + QUIET + 1)
    assert len(receiver.got) == 1 and "alice/s" in registry.streams


async def test_a_stream_whose_publisher_is_gone_ends_as_a_disconnect():
    sweeper, receiver, presence, registry = await sweeper_with_a_relayed_stream("alice")
    await presence.release_agent("alice", "ws-p")  # its node died and was reaped
    await sweeper.sweep(100.0 + QUIET / 2)
    assert len(receiver.got) == 1  # not quiet long enough yet: nothing asked
    await sweeper.sweep(100.0 + QUIET + 1)
    notice = orjson.loads(receiver.got[-1])
    assert notice["type"] == "space.event.cancel" and notice["event_id"] == "alice/s"
    assert notice["reason"] == "publisher_disconnected" and notice["from"] == "alice"
    assert "alice/s" not in registry.streams
    await sweeper.sweep(100.0 + QUIET + 2)
    assert len(receiver.got) == 2  # ended once


async def test_a_stream_of_a_publisher_back_on_another_connection_ends_as_a_disconnect():
    """Its node died and was reaped, and the agent reconnected elsewhere at
    once (the SDKs do): the stream was the old connection's — the new one was
    accepted after it opened — so it ends now, not at twice the idle timeout."""
    sweeper, receiver, presence, registry = await sweeper_with_a_relayed_stream("alice")
    await presence.release_agent("alice", "ws-p")
    now_ms = int(time.time() * 1000)
    await presence.claim_agent(AgentRecord("alice", "node-b", "ws-q", connected_at=now_ms))
    await sweeper.sweep(100.0 + QUIET + 1)
    notice = orjson.loads(receiver.got[-1])
    assert notice["type"] == "space.event.cancel" and notice["reason"] == "publisher_disconnected"
    assert "alice/s" not in registry.streams


async def test_a_quiet_stream_of_a_connection_older_than_it_goes_on():
    sweeper, receiver, presence, registry = await sweeper_with_a_relayed_stream("alice")
    await presence.release_agent("alice", "ws-p")
    before = int((time.time() - 60) * 1000)  # accepted long before the stream opened
    await presence.claim_agent(AgentRecord("alice", "node-b", "ws-q", connected_at=before))
    await sweeper.sweep(100.0 + QUIET + 1)
    assert len(receiver.got) == 1 and "alice/s" in registry.streams


class OpenStreams:
    """A local publisher's session, as far as the sweep asks it."""

    def __init__(self, *open_ids: str):
        self.open_ids = list(open_ids)
        self.open_streams = 0  # nothing for the session sweep to expire

    def check_liveness(self, now: float) -> None:
        return None

    grant = type("G", (), {"expires_at": None})()

    def streams_in(self, space: str) -> list[str]:
        return self.open_ids


async def test_a_publisher_back_on_this_node_ends_the_stream_its_old_connection_left():
    """Reconnected to a node receiving its old stream: that connection's
    session knows exactly which streams it has open — not this one."""
    sweeper, receiver, _, registry = await sweeper_with_a_relayed_stream("alice")
    alice = Recorder("alice")
    alice.session = OpenStreams()  # type: ignore[attr-defined]
    registry.add("conn-a", alice)
    registry.bind_agent(alice)
    await sweeper.sweep(100.0 + QUIET + 1)
    notice = orjson.loads(receiver.got[-1])
    assert notice["reason"] == "publisher_disconnected" and "alice/s" not in registry.streams


async def test_a_quiet_stream_its_local_publisher_has_open_goes_on():
    sweeper, receiver, _, registry = await sweeper_with_a_relayed_stream("alice")
    alice = Recorder("alice")
    alice.session = OpenStreams("alice/s")  # type: ignore[attr-defined]
    registry.add("conn-a", alice)
    registry.bind_agent(alice)
    await sweeper.sweep(100.0 + QUIET + 1)
    assert len(receiver.got) == 1 and "alice/s" in registry.streams
