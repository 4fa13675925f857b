"""The receiving side's bookkeeping of who stops receiving a stream (contract
§19): which stops a node reports to the producer's side, and the census count.
Pure: fake members, no node."""

from __future__ import annotations

import pytest

from hub.core.registry import Registry
from hub.core.stream_audiences import ReceiverStop, StreamAudiences, StreamOp
from tests.unit.core.test_registry import Recorder, frame


class Reports:
    def __init__(self) -> None:
        self.stops: list[ReceiverStop] = []

    def __call__(self, stop: ReceiverStop) -> None:
        self.stops.append(stop)

    def said(self) -> list[tuple[str, bool]]:
        """(receiver, left) of each report, in order."""
        return [(s.receiver, s.left) for s in self.stops]


@pytest.fixture
def node() -> tuple[Registry[Recorder], dict[str, Recorder], Reports]:
    """One node: the publisher ``p`` and receivers ``a``, ``b``, ``c`` in ``room``."""
    reports = Reports()
    registry: Registry[Recorder] = Registry(on_stream_stop=reports)
    members = {name: Recorder(name) for name in ("p", "a", "b", "c")}
    for i, m in enumerate(members.values()):
        registry.add(f"conn-{i}", m)
        registry.bind_agent(m)
        registry.join("room", m)
    return registry, members, reports


def open_stream(registry: Registry[Recorder], to: tuple[str, ...] | None = None) -> None:
    registry.deliver("room", frame("d1"), stream="p/s", op=StreamOp.OPEN, to=to)


def test_an_addressed_stream_reports_each_recipient_that_stops(node):
    registry, m, reports = node
    open_stream(registry, to=("a", "b", "p"))  # the publisher's echo is in `to`
    assert registry.stop_receiving(m["a"], "p/s", "room")
    registry.leave("room", m["b"])
    assert reports.stops == [
        ReceiverStop("p/s", "room", "p", "a", left=False, addressed=True),
        ReceiverStop("p/s", "room", "p", "b", left=True, addressed=True),
    ]


def test_an_unaddressed_stream_reports_only_its_last_receiver_here(node):
    registry, m, reports = node
    open_stream(registry)
    registry.stop_receiving(m["a"], "p/s", "room")
    registry.stop_receiving(m["b"], "p/s", "room")
    assert reports.stops == [] and registry.streams.receivers("p/s") == 1
    registry.evict("conn-3", m["c"])  # c disconnects: the last one
    assert reports.said() == [("c", True)] and not reports.stops[0].addressed
    assert registry.streams.receivers("p/s") == 0


def test_the_publishers_own_copy_is_not_a_receiver(node):
    registry, m, reports = node
    open_stream(registry)
    assert registry.streams.receivers("p/s") == 3  # a, b, c — not p's echo
    registry.leave("room", m["p"])
    for name in "ab":
        registry.stop_receiving(m[name], "p/s", "room")
    assert reports.stops == []
    registry.stop_receiving(m["c"], "p/s", "room")
    assert reports.said() == [("c", False)]


def test_a_member_who_joined_mid_stream_does_not_count(node):
    registry, m, reports = node
    open_stream(registry)
    late = Recorder("late")
    registry.add("conn-late", late)
    registry.join("room", late)
    for name in "abc":
        registry.stop_receiving(m[name], "p/s", "room")
    assert reports.said() == [("c", False)], "told although `late` is in the space"
    assert registry.streams.receivers("p/s") == 0
    assert not registry.stop_receiving(late, "p/s", "room")  # it never received it


def test_a_stream_without_receivers_is_never_reported(node):
    registry, m, reports = node
    registry.deliver("room", frame("d1"), stream="p/s", op=StreamOp.OPEN, to=("p",))
    registry.leave("room", m["a"])
    registry.leave("room", m["p"])
    assert reports.stops == [] and registry.streams.receivers("p/s") == 0


def test_a_late_joiner_dropped_at_its_join_boundary_is_not_reported(node):
    """Recovery drops a joiner whose join position lies past a stream's first
    frame (``report=False``): it never was a receiver in earnest."""
    registry, m, reports = node
    open_stream(registry, to=("a", "p"))
    assert registry.stop_receiving(m["a"], "p/s", "room", report=False)
    assert reports.stops == []


def test_the_end_of_a_stream_reports_nothing_and_forgets_it(node):
    registry, m, reports = node
    open_stream(registry)
    registry.deliver("room", frame("done"), stream="p/s", op=StreamOp.END)
    registry.leave("room", m["a"])
    assert reports.stops == [] and registry.streams.receivers("p/s") == 0


def test_a_leave_reports_every_stream_of_that_space_it_received(node):
    registry, m, reports = node
    registry.deliver("room", frame("x"), stream="p/x", op=StreamOp.OPEN, to=("a", "p"))
    registry.deliver("room", frame("y"), stream="b/y", op=StreamOp.OPEN, to=("a", "b"))
    registry.join("lab", m["a"])
    registry.deliver("lab", frame("z"), stream="p/z", op=StreamOp.OPEN, to=("a",))
    registry.leave("room", m["a"])
    assert sorted((s.stream_id, s.publisher) for s in reports.stops) == [
        ("b/y", "b"),
        ("p/x", "p"),
    ]


def test_without_a_listener_nothing_is_reported():
    audiences: StreamAudiences[Recorder] = StreamAudiences()
    a = Recorder("a")
    audiences.open("p/s", "room", {a: None}, now=0.0, addressed=True)
    assert audiences.stop_receiving(a, "p/s", "room")
    assert audiences.receivers("p/s") == 0 and audiences.receivers("p/unknown") == 0
