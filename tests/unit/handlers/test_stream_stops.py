"""Producers hear when nobody receives their stream (contract §19), on one
node (the memory backplane: a census reaches this node alone) and with the
other nodes' signals and census answers played by the test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from hub.cluster.backplane import Delivery, StreamOp
from hub.core.actions import StreamDelta
from hub.core.frames import OutFrame
from hub.core.peer import PeerKind
from hub.core.registry import Registry
from hub.core.session import Session
from hub.core.stream_audiences import ReceiverStop
from hub.handlers.stream_stops import StreamStops
from tests.support.handlers import HandlerRig, until
from tests.support.peers import FakePeer
from tests.unit.core.test_session_streams import DEFAULTS

Room = tuple[HandlerRig, FakePeer, FakePeer, FakePeer]


@pytest.fixture
async def room(rig: HandlerRig) -> Room:
    """alice (the producer), bob and carol in ``room``, nothing received yet."""
    peers = [await rig.connect(a) for a in ("alice", "bob", "carol")]
    for p in peers:
        await rig.join(p, "room")
    for p in peers:
        p.frames.clear()
    return rig, *peers  # type: ignore[return-value]


def delta(eid: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "space.event.delta", "space": "room", "event_id": eid,
            "data": {"text": text}, **extra}  # fmt: skip


async def cancel_as_receiver(rig: HandlerRig, peer: FakePeer, stream: str = "alice/s1") -> None:
    msg = {"type": "space.event.cancel", "space": "room", "event_id": stream, "id": "rc"}
    await rig.send(peer, msg)
    assert peer.messages()[-1]["reason"] == "receiver_cancelled"  # its own ack


def notices(peer: FakePeer) -> list[dict[str, Any]]:
    """The producer's notices: cancels of its own (un-namespaced) ids."""
    return [m for m in peer.messages("space.event.cancel") if "/" not in m["event_id"]]


async def told(peer: FakePeer) -> dict[str, Any]:
    await until(lambda: bool(notices(peer)))
    (notice,) = notices(peer)
    return notice


async def settle(rig: HandlerRig) -> None:
    """Let every spawned census and relay finish."""
    for _ in range(5):
        await asyncio.gather(*list(rig.stream_stops._tasks))
        await asyncio.sleep(0)


# ── addressed streams ────────────────────────────────────────────────────────


async def test_the_askers_cancel_reaches_the_producer_with_its_own_id(room: Room) -> None:
    rig, alice, bob, carol = room
    await rig.send(alice, delta("s1", "a", to="bob"))
    await cancel_as_receiver(rig, bob)
    notice = await told(alice)
    assert notice == {
        "type": "space.event.cancel",
        "space": "room",
        "event_id": "s1",
        "from": "bob",
        "timestamp": notice["timestamp"],
        "reason": "receiver_cancelled",
    }
    await settle(rig)
    # Its echo copy ended like every copy, hub-side id, from the producer.
    relayed = [m for m in alice.messages("space.event.cancel") if m["event_id"] == "alice/s1"]
    assert len(relayed) == 1 and relayed[0]["from"] == "alice"
    assert relayed[0]["reason"] == "receiver_cancelled" and isinstance(relayed[0]["seq"], int)
    assert carol.messages() == []
    assert alice.session is not None and alice.session.open_streams == 0


async def test_every_recipient_must_stop_before_the_producer_is_told(room: Room) -> None:
    rig, alice, bob, carol = room
    await rig.send(alice, delta("s1", "a", to=["bob", "carol"]))
    await cancel_as_receiver(rig, bob)
    await settle(rig)
    assert notices(alice) == []
    await rig.send(alice, delta("s1", "b"))
    assert [m["data"]["text"] for m in carol.messages("space.event.delta")] == ["a", "b"]
    await rig.send(carol, {"type": "space.leave", "space": "room", "id": "l"})
    notice = await told(alice)
    assert (notice["from"], notice["reason"]) == ("carol", "receivers_left")


async def test_a_recipient_that_disconnects_counts_as_left(room: Room) -> None:
    rig, alice, bob, _ = room
    await rig.send(alice, delta("s1", "a", to="bob", echo=False))
    await rig.membership.detach(bob, bob.record)
    notice = await told(alice)
    assert (notice["from"], notice["reason"]) == ("bob", "receivers_left")
    await settle(rig)
    assert alice.messages("space.event.cancel") == [notice], "echo off: only the notice"


async def test_deltas_in_flight_are_dropped_and_the_done_answered(room: Room) -> None:
    rig, alice, bob, carol = room
    await rig.send(alice, delta("s1", "a", to="bob"))
    await cancel_as_receiver(rig, bob)
    await told(alice)
    await settle(rig)
    seq = (await rig.backplane.position("room")).seq
    for i in range(5):
        await rig.send(alice, delta("s1", f"late{i}", id=f"d{i}"))
    await rig.send(alice, {"type": "space.event.done", "space": "room", "event_id": "s1",
                           "id": "fin"})  # fmt: skip
    assert alice.errors() == []
    assert (await rig.backplane.position("room")).seq == seq, "nothing more published"
    answer = alice.messages()[-1]
    assert answer["type"] == "space.event.cancel" and answer["id"] == "fin"
    assert answer["event_id"] == "s1" and answer["from"] == "bob"
    await rig.send(alice, delta("s1", "after", id="x"))
    assert alice.errors() == [("INVALID_REQUEST", "x")]
    # The slot is free: a new stream opens.
    await rig.send(alice, delta("s2", "next", to="carol"))
    assert carol.one("space.event.delta")["event_id"] == "alice/s2"


async def test_a_bridge_producer_is_told_with_the_hub_side_id(rig: HandlerRig) -> None:
    """The hub's bridges (virtual members) match their reply streams by the
    hub-side id (adapters/a2a/outbound.py): the same notice, that id."""
    bridge = await rig.connect("a2a-x", kind=PeerKind.VIRTUAL)
    asker = await rig.connect("asker")
    for p in (bridge, asker):
        await rig.join(p, "room")
    await rig.send(bridge, delta("a2a-1", "a", to="asker"))
    await cancel_as_receiver(rig, asker, "a2a-x/a2a-1")
    await until(lambda: bool(bridge.messages("space.event.cancel")))
    notice = bridge.messages("space.event.cancel")[0]
    assert notice["event_id"] == "a2a-x/a2a-1" and notice["from"] == "asker"
    assert notice["reason"] == "receiver_cancelled"


# ── unaddressed streams ──────────────────────────────────────────────────────


async def test_unaddressed_told_only_after_the_last_current_receiver(room: Room) -> None:
    rig, alice, bob, carol = room
    await rig.send(alice, delta("s1", "a"))
    late = await rig.connect("late")
    await rig.join(late, "room")  # joined mid-stream: none of it, does not count
    await cancel_as_receiver(rig, bob)
    await settle(rig)
    assert notices(alice) == []
    await cancel_as_receiver(rig, carol)
    notice = await told(alice)
    assert (notice["from"], notice["reason"]) == ("carol", "receiver_cancelled")
    assert late.messages("space.event.delta", "space.event.cancel") == []


async def test_a_stream_nobody_ever_received_is_never_ended_for_it(rig: HandlerRig) -> None:
    alice = await rig.connect("alice")
    await rig.join(alice, "room")
    await rig.send(alice, delta("s1", "a"))
    bob = await rig.connect("bob")
    await rig.join(bob, "room")
    await rig.send(bob, {"type": "space.leave", "space": "room", "id": "l"})
    await settle(rig)
    assert notices(alice) == [] and alice.session is not None
    assert alice.session.open_streams == 1


async def test_a_hub_chunked_publish_tells_its_publisher_nothing(make_rig: Any) -> None:
    """The publisher handed its text over whole and was acknowledged: there is
    nothing for it to stop. The receiver's cancel still stops its copy."""
    rig = await make_rig(stream_threshold=1024, stream_chunk=256)
    alice, bob = await rig.connect("alice"), await rig.connect("bob")
    for p in (alice, bob):
        await rig.join(p, "room")
    switches = rig.backplane.switches
    first_gate = switches.hold("publish")
    publishing = asyncio.ensure_future(rig.publish(alice, "room", {"text": "x" * 4096}, id="big"))
    await switches.reached("publish")
    rest_gate = switches.hold("publish")  # the second delta on waits here
    first_gate.set()
    await until(lambda: bool(bob.messages("space.event.delta")))
    first = bob.messages("space.event.delta")[0]
    await cancel_as_receiver(rig, bob, first["event_id"])
    rest_gate.set()
    await publishing
    await settle(rig)
    assert alice.messages("space.event.done")[0]["request_id"] == "big"
    assert [m for m in alice.messages("space.event.cancel")] == []
    assert bob.messages("space.event.delta", "space.event.done") == [first]


# ── what other nodes say ─────────────────────────────────────────────────────


def signal(space: str, **body: Any) -> Delivery:
    return Delivery(space, orjson.dumps(body), op=StreamOp.SIGNAL)


async def test_a_receivers_stop_on_another_node_reaches_the_producer(room: Room) -> None:
    rig, alice, _, _ = room
    await rig.presence.join_space("room", "remote", 100)  # a member on another node
    await rig.send(alice, delta("s1", "a", to="remote"))
    await rig.send(alice, delta("s2", "a", to="remote"))
    rig.delivery.deliver(signal("room", op="stopped", stream="alice/s1", receiver="remote",
                                left=False))  # fmt: skip
    notice = await told(alice)
    assert (notice["event_id"], notice["from"]) == ("s1", "remote")
    # The reaper's word for a dead node's agents: they left.
    rig.delivery.deliver(signal("room", op="departed", agents=["ghost", "remote"]))
    await until(lambda: len(notices(alice)) == 2)
    assert notices(alice)[1]["event_id"] == "s2"
    assert notices(alice)[1]["reason"] == "receivers_left"


async def test_malformed_signals_are_ignored(room: Room) -> None:
    rig, alice, _, _ = room
    await rig.send(alice, delta("s1", "a", to="bob"))
    for body in (b"not json", b"[]", b"{}", b'{"op":"departed","agents":"bob"}',
                 b'{"op":"stopped"}', b'{"op":"census"}'):  # fmt: skip
        rig.delivery.deliver(Delivery("room", body, op=StreamOp.SIGNAL))
    rig.stream_stops.census_result({"token": "unknown", "receivers": 0})
    await settle(rig)
    assert notices(alice) == [] and alice.session is not None
    assert alice.session.open_streams == 1


class Bare:
    """The census without the rest of a node: a registry, the producers'
    sessions, and this class as the backplane (``nodes`` nodes subscribed to
    the space, this one among them; the others' answers are the test's) and
    as the publisher of the relayed ends."""

    def __init__(self, nodes: int, census_timeout: float = 5.0):
        self.nodes = nodes
        self.filling: set[str] = set()
        self.questions: list[dict[str, Any]] = []
        self.answers: list[tuple[str, dict[str, Any]]] = []
        self.relayed: list[Any] = []
        self.registry: Registry[FakePeer] = Registry(on_stream_stop=self._stopped)
        self.stops = StreamStops(
            "node-a", self.registry, self, self,  # type: ignore[arg-type]
            filling=self.filling.__contains__, census_timeout=census_timeout,
        )  # fmt: skip

    def _stopped(self, stop: ReceiverStop) -> None:
        self.stops.stopped(stop)

    # the backplane
    async def send(self, message: Delivery) -> int:
        body = orjson.loads(message.frame)
        if body["op"] == "census":
            self.questions.append(body)
        self.stops.on_signal(message)  # this node hears it too
        return self.nodes

    async def send_to_node(self, node_id: str, payload: bytes) -> int:
        self.answers.append((node_id, orjson.loads(payload)))
        return 1

    # the publisher
    async def end_unheard(self, peer: FakePeer, a: Any) -> None:
        self.relayed.append(a)

    def member(self, agent_id: str) -> FakePeer:
        peer = FakePeer(agent_id, f"c-{agent_id}")
        peer.session = Session(agent_id, peer.connection_id, DEFAULTS, now=0.0)
        self.registry.add(peer.connection_id, peer)
        self.registry.bind_agent(peer)
        self.registry.join("room", peer)
        peer.session.on_joined("room")
        return peer

    def stream(self, peer: FakePeer, eid: str) -> None:
        """``peer`` opens an unaddressed stream, relayed to the members here."""
        assert peer.session is not None
        (opened,) = peer.session.receive(orjson.dumps(delta(eid, "a")).decode(), 0.0)
        assert isinstance(opened, StreamDelta)
        self.registry.deliver("room", OutFrame(b"{}"), stream=opened.stream_id, op=StreamOp.OPEN)

    def cancel(self, peer: FakePeer, stream: str) -> None:
        assert self.registry.stop_receiving(peer, stream, "room")

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.gather(*list(self.stops._tasks))
            await asyncio.sleep(0)


@pytest.fixture
async def bare() -> AsyncIterator[Any]:
    made: list[Bare] = []

    def make(nodes: int, census_timeout: float = 5.0) -> Bare:
        made.append(Bare(nodes, census_timeout))
        return made[-1]

    yield make
    for b in made:
        await b.stops.aclose()


async def test_a_census_waits_for_every_node_reached(bare: Any) -> None:
    b = bare(nodes=3)
    alice, bob = b.member("alice"), b.member("bob")
    b.stream(alice, "s1")
    b.cancel(bob, "alice/s1")
    await until(lambda: len(b.questions) == 1)
    question = b.questions[0]
    assert question["stream"] == "alice/s1" and question["reply_to"] == "node-a"
    b.stops.census_result({"token": question["token"], "receivers": 0})
    await asyncio.sleep(0)
    assert notices(alice) == [], "one node has not answered yet"
    b.stops.census_result({"token": question["token"], "receivers": 0})
    notice = await told(alice)
    assert (notice["event_id"], notice["from"]) == ("s1", "bob")
    await b.settle()
    assert [r.stream_id for r in b.relayed] == ["alice/s1"]


async def test_a_node_still_receiving_keeps_the_stream_going(bare: Any) -> None:
    b = bare(nodes=2)
    alice, bob = b.member("alice"), b.member("bob")
    b.stream(alice, "s1")
    b.cancel(bob, "alice/s1")
    await until(lambda: len(b.questions) == 1)
    b.stops.census_result({"token": b.questions[0]["token"], "receivers": 1})
    await b.settle()
    assert notices(alice) == [] and b.relayed == [] and not b.stops._censuses
    assert alice.session is not None and alice.session.open_streams == 1


async def test_a_node_that_does_not_answer_leaves_the_question_open(bare: Any) -> None:
    b = bare(nodes=2, census_timeout=0.05)
    alice, bob = b.member("alice"), b.member("bob")
    b.stream(alice, "s1")
    b.cancel(bob, "alice/s1")
    await b.settle()  # the census timed out
    assert len(b.questions) == 1 and notices(alice) == [] and not b.stops._censuses


async def test_this_node_answers_a_census_from_another(bare: Any) -> None:
    b = bare(nodes=1)
    alice, _, _ = b.member("alice"), b.member("bob"), b.member("carol")
    b.stream(alice, "s1")
    b.stops.on_signal(signal("room", op="census", stream="alice/s1", token="t",
                             reply_to="node-b"))  # fmt: skip
    b.stops.on_signal(signal("elsewhere", op="census", stream="x/y", token="u",
                             reply_to="node-b"))  # fmt: skip
    await b.settle()
    assert b.answers == [
        ("node-b", {"op": "census_result", "token": "t", "receivers": 2}),  # bob, carol
        ("node-b", {"op": "census_result", "token": "u", "receivers": 0}),
    ]


async def test_a_space_being_filled_in_does_not_answer(bare: Any) -> None:
    """Its missed messages may hold the stream's first frame: no answer (the
    census stays open) rather than a wrong none."""
    b = bare(nodes=1)
    b.member("bob")
    b.filling.add("room")
    b.stops.on_signal(signal("room", op="census", stream="alice/s1", token="t",
                             reply_to="node-b"))  # fmt: skip
    await b.settle()
    assert b.answers == []
