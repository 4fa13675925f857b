"""The registry, spaces and stream audiences without sockets."""

from __future__ import annotations

import pytest

from hub.config.settings import DeclaredSpace
from hub.core.frames import OutFrame
from hub.core.registry import Registry
from hub.core.spaces import SpaceDirectory
from hub.core.stream_audiences import StreamAudiences, StreamOp
from protocol.errors import ProtocolError


class Recorder:
    """A Member that keeps what it was given."""

    def __init__(self, agent_id: str):
        self.agent_id = agent_id
        self.closing = False
        self.got: list[bytes] = []

    def push(self, frame: OutFrame) -> bool:
        self.got.append(frame.payload)
        return True

    def __repr__(self) -> str:
        return f"Recorder({self.agent_id})"


def frame(text: str) -> OutFrame:
    return OutFrame(text.encode())


@pytest.fixture
def reg() -> tuple[Registry[Recorder], dict[str, Recorder]]:
    registry: Registry[Recorder] = Registry()
    members = {name: Recorder(name) for name in ("a", "b", "c")}
    for i, m in enumerate(members.values()):
        registry.add(f"conn-{i}", m)
        registry.bind_agent(m)
        registry.join("room", m)
    return registry, members


def test_deliver_reaches_every_local_member_once(reg):
    registry, m = reg
    assert registry.deliver("room", frame("e1")) == 3
    assert [x.got for x in m.values()] == [[b"e1"]] * 3
    assert registry.deliver("elsewhere", frame("e2")) == 0


def test_exclude_is_the_publisher_without_echo(reg):
    registry, m = reg
    assert registry.deliver("room", frame("e"), exclude="a") == 2
    assert m["a"].got == [] and m["b"].got == [b"e"]


def test_addressed_delivery_only_to_the_named_local_members(reg):
    registry, m = reg
    outsider = Recorder("d")
    registry.add("conn-9", outsider)
    registry.bind_agent(outsider)  # connected, but not in the space
    assert registry.deliver("room", frame("to"), to=("c", "a", "d", "zz")) == 2
    assert m["a"].got == [b"to"] and m["c"].got == [b"to"]
    assert m["b"].got == [] and outsider.got == []


def test_leave_and_evict(reg):
    registry, m = reg
    assert not registry.leave("room", m["a"])
    assert registry.deliver("room", frame("x")) == 2
    assert registry.evict("conn-1", m["b"]) == []
    assert registry.evict("conn-2", m["c"]) == ["room"]  # the last local member
    assert not registry.has_space("room")
    assert "b" not in registry.agents and "conn-2" not in registry.connections


def test_a_stream_audience_is_fixed_by_its_first_frame(reg):
    registry, m = reg
    assert registry.deliver("room", frame("d1"), stream="a/s", op=StreamOp.OPEN, exclude="a") == 2
    late = Recorder("late")
    registry.add("conn-late", late)
    registry.join("room", late)  # joins mid-stream: gets none of it
    assert registry.deliver("room", frame("d2"), stream="a/s", op=StreamOp.DELTA) == 2
    assert not registry.stop_receiving(m["b"], "a/s", "elsewhere")  # not that space's stream
    assert registry.stop_receiving(m["b"], "a/s", "room")  # receiver cancel
    assert not registry.stop_receiving(m["b"], "a/s", "room")
    assert registry.deliver("room", frame("done"), stream="a/s", op=StreamOp.END) == 1
    assert m["c"].got == [b"d1", b"d2", b"done"]
    assert m["b"].got == [b"d1", b"d2"] and late.got == [] and m["a"].got == []
    # The record is gone after the end: nothing more is relayed.
    assert registry.deliver("room", frame("again"), stream="a/s", op=StreamOp.DELTA) == 0


def test_a_streams_end_ends_its_record_when_nobody_is_left_here(reg):
    """The publisher's cancel (or the sweep's) can come once the space's last
    local member has gone: it still ends the record, which would otherwise be
    kept — and looked at by every sweep — for ever (an outside audit: 14 % of
    vanished publishers' streams stayed)."""
    registry, m = reg
    registry.deliver("room", frame("d1"), stream="a/s", op=StreamOp.OPEN)
    for member in m.values():
        registry.leave("room", member)
    assert registry.deliver("room", frame("cancel"), stream="a/s", op=StreamOp.END) == 0
    assert list(registry.idle_streams(now=10**9, idle=0)) == []


def test_an_unknown_stream_is_relayed_to_nobody(reg):
    registry, _ = reg
    assert registry.deliver("room", frame("d"), stream="x/y", op=StreamOp.DELTA) == 0


def test_idle_streams_are_found_and_ended_through_the_fan_out(reg):
    registry, m = reg
    registry.deliver("room", frame("p1-open"), stream="p/1", op=StreamOp.OPEN, now=10.0)
    registry.deliver("room", frame("p2-open"), stream="p/2", op=StreamOp.OPEN, now=15.0)
    registry.leave("room", m["c"])
    assert [r.stream_id for r in registry.idle_streams(now=21.0, idle=10.0)] == ["p/1"]
    assert len(registry.streams) == 2  # found, not ended: ending it is delivering its end
    assert registry.deliver("room", frame("cancel"), stream="p/1", op=StreamOp.END) == 2
    assert m["a"].got[-1] == b"cancel" and m["c"].got == [b"p1-open", b"p2-open"]
    assert len(registry.streams) == 1 and "p/2" in registry.streams


def test_stream_audiences_end_with_their_last_frame():
    audiences: StreamAudiences[str] = StreamAudiences()
    audiences.open("p/2", "room", {"m": None}, now=15.0)
    assert audiences.audience("p/2", StreamOp.END, now=22.0) == {"m": None}
    assert len(audiences) == 0


def test_space_rules():
    spaces = SpaceDirectory(
        {"lobby": DeclaredSpace(id="lobby", capacity=5)}, default_capacity=100, auto_create=False
    )
    assert spaces.capacity("lobby") == 5 and spaces.capacity("other") == 100
    assert spaces.persistent("lobby") and spaces.persistent("agent.status")
    assert not spaces.persistent("other")
    spaces.check_joinable("lobby", "r1")
    spaces.check_joinable("agent.status", "r2")
    for space, code in (("other", "SPACE_NOT_FOUND"), ("mcp.tools", "SPACE_NOT_FOUND")):
        with pytest.raises(ProtocolError) as info:
            spaces.check_joinable(space, "r3")
        assert info.value.code == code and info.value.request_id == "r3"


def test_evicting_a_member_leaves_exactly_its_spaces():
    registry: Registry[Recorder] = Registry()
    alice, bob = Recorder("alice"), Recorder("bob")
    registry.add("c1", alice)
    registry.add("c2", bob)
    for space in ("a", "b", "c"):
        registry.join(space, alice)
    registry.join("a", alice)  # twice: still once
    registry.join("b", bob)
    registry.leave("c", alice)
    assert registry.evict("c1", alice) == ["a"]  # "b" still has bob
    assert registry.members("b") == [bob]
    assert registry.spaces == ["b"]
    assert registry._joined == {bob: ("b",)}
    assert registry.evict("c2", bob) == ["b"]
    assert registry._joined == {} and registry.spaces == []
