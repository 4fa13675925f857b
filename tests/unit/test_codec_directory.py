"""Builders and parsers of membership at scale and the agent directory."""

import orjson
import pytest

from hub.cluster.presence import AgentRecord
from hub.handlers.membership import merged
from protocol import codec
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import AgentInfo, AgentList, SpaceMembers, hub_message_adapter


def test_members_event_carries_the_list_only_when_given():
    small = orjson.loads(codec.members("s", ["a", "b"], 2, "b", None))
    assert small == {
        "type": "space.members", "space": "s", "members": ["a", "b"], "member_count": 2,
        "joined": "b", "left": None,
    }  # fmt: skip
    big = orjson.loads(codec.members("s", None, 5000, None, "z"))
    assert "members" not in big and big["member_count"] == 5000 and big["left"] == "z"
    for frame in (
        codec.members("s", None, 5000, None, "z"),
        codec.members_page("r1", "s", [], 0, None),
    ):
        assert isinstance(hub_message_adapter.validate_json(frame), SpaceMembers)


def test_agent_list_reply_parses():
    record = AgentRecord("a", "node-1", "ws-1", "llm", ("chat",), {"k": 1}, 1_700_000_000_000)
    frame = codec.agent_list("r", [record.directory()], "a")
    msg = hub_message_adapter.validate_json(frame)
    assert isinstance(msg, AgentList) and msg.id == "r" and msg.next_cursor == "a"
    assert msg.agents[0].node == "node-1" and msg.agents[0].connected_at == 1_700_000_000_000


def test_handshake_details():
    assert codec.handshake_info("a", {"token": ["t"]}) is None
    info = codec.handshake_info(
        "a", {"type": ["llm"], "capability": ["x", "y"], "metadata": ['{"v":1}']}
    )
    assert info == AgentInfo(id="a", type="llm", capabilities=["x", "y"], metadata={"v": 1})
    assert codec.handshake_info("a", {"capability": ["x"]}).model_fields_set == {
        "id",
        "capabilities",
    }
    for query in (
        {"type": ["a", "b"]},
        {"metadata": ["[]"]},
        {"metadata": ["{"]},
        {"metadata": ['{"n": 123456789012345678901234567890}']},
        {"capability": ["c" * 129]},
        {"capability": [f"c{i}" for i in range(257)]},
    ):
        with pytest.raises(ProtocolError) as exc:
            codec.handshake_info("a", query)
        assert exc.value.code is ErrorCode.INVALID_REQUEST


def test_register_merge_rule():
    before = AgentRecord("a", "n", "ws-1", "llm", ("chat",), {"v": 1}, 123)

    def register(**agent):
        return merged(before, AgentInfo.model_validate({"id": "a", **agent}), "n", "ws-1")

    assert register(metadata={"v": 2}) == AgentRecord(
        "a", "n", "ws-1", "llm", ("chat",), {"v": 2}, 123
    )
    assert register(type=None).type is None
    assert register(capabilities=[]).capabilities == ()
    assert register() == before
    fresh = merged(None, AgentInfo(id="a", type="t"), "n", "ws-2")
    assert (fresh.type, fresh.capabilities, fresh.metadata) == ("t", (), {})
