import pytest

from protocol.errors import ErrorCode, ProtocolError
from protocol.names import SpaceKind, check_event_id, is_valid_agent_id, space_kind


@pytest.mark.parametrize(
    "agent_id",
    [
        "a",
        "agent-001",
        "A.b_c:d-e",
        "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
        "x" * 128,
    ],
)
def test_valid_agent_ids(agent_id):
    assert is_valid_agent_id(agent_id)


@pytest.mark.parametrize("agent_id", ["", "-a", ".a", "a b", "a/b", "x" * 129, "é", None, 5])
def test_invalid_agent_ids(agent_id):
    assert not is_valid_agent_id(agent_id)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("general", SpaceKind.PUBLIC),
        ("a_b-c9", SpaceKind.PUBLIC),
        ("task.build-42.step_1", SpaceKind.PUBLIC),
        ("agent.status", SpaceKind.SYSTEM),
        ("file.changes", SpaceKind.SYSTEM),
        ("mcp.tools", SpaceKind.SYSTEM),
        ("x" * 128, SpaceKind.PUBLIC),
    ],
)
def test_space_kinds(name, kind):
    assert space_kind(name) is kind


@pytest.mark.parametrize(
    "name", ["", "General", "a b", "task.", "foo.bar", "agent.", "x" * 129, "a/b", 5, None]
)
def test_invalid_space_names(name):
    with pytest.raises(ProtocolError) as info:
        space_kind(name)
    assert info.value.code is ErrorCode.INVALID_REQUEST


def test_event_ids():
    assert check_event_id("evt_001") == "evt_001"
    for bad in ["", "a/b", "x" * 129, "a b"]:
        with pytest.raises(ProtocolError):
            check_event_id(bad)
