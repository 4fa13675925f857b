"""``space.members`` events in the Python SDK: an agent id for one change (the
seed's shape) or lists for coalesced changes, both read as lists by the
application, and ``agora-hub tail`` showing either."""

from __future__ import annotations

import io

import orjson

from agora_client import MembersChanged
from agora_client.cli import Output, TailPrinter
from agora_client.models import parse_members


def test_one_change_keeps_the_seeds_fields_and_lists_it() -> None:
    change = parse_members(
        {"space": "s", "members": ["a", "b"], "member_count": 2, "joined": "b", "left": None}
    )
    assert change == MembersChanged("s", ["a", "b"], 2, joined="b", joined_ids=["b"])
    assert change.left is None and change.left_ids == []


def test_coalesced_changes_are_lists_in_order() -> None:
    change = parse_members({"space": "s", "member_count": 250, "joined": ["x", "y"], "left": ["z"]})
    assert change is not None and change.members is None
    assert (change.joined_ids, change.left_ids) == (["x", "y"], ["z"])
    assert (change.joined, change.left) == (None, None), "not one agent: read the lists"
    empty = parse_members({"space": "s", "member_count": 1, "joined": [], "left": ["z", 7]})
    assert empty is not None and (empty.joined_ids, empty.left_ids) == ([], ["z"])


def test_built_with_the_single_fields_the_lists_agree() -> None:
    change = MembersChanged("s", None, 3, left="x")
    assert (change.joined_ids, change.left_ids) == ([], ["x"])


def test_tail_shows_either_shape() -> None:
    buf = io.StringIO()
    printer = TailPrinter(Output(buf, json_lines=False))
    printer.members(MembersChanged("s", ["a", "b"], 2, joined="b"))
    printer.members(MembersChanged("s", None, 3, joined_ids=["c", "d"], left_ids=["b"]))
    lines = buf.getvalue().splitlines()
    assert lines[0].endswith("* b joined s (2 members)")
    assert lines[1].endswith("* c, d joined; b left s (3 members)")


def test_tail_json_lines_relay_what_the_hub_sent() -> None:
    buf = io.StringIO()
    printer = TailPrinter(Output(buf, json_lines=True))
    printer.members(MembersChanged("s", ["a"], 1, left="b"))
    printer.members(MembersChanged("s", None, 3, joined_ids=["c", "d"], left_ids=[]))
    one, many = (orjson.loads(line) for line in buf.getvalue().splitlines())
    assert (one["joined"], one["left"]) == (None, "b")
    assert (many["joined"], many["left"]) == (["c", "d"], [])
