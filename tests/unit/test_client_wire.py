"""The client's copy of the wire constants agrees with the hub's ``protocol/``.

``agora_client`` is installed without the server, so it keeps its own message
types, error codes, close codes and agent-id rule (``agora_client/wire.py``).
These tests make that copy impossible to drift: every name the client has must
exist in ``protocol/`` with the same value.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agora_client import wire
from protocol import errors, messages, names


@pytest.mark.parametrize(
    ("client_enum", "hub_enum"),
    [
        (wire.MessageType, messages.MessageType),
        (wire.ErrorCode, errors.ErrorCode),
        (wire.CloseCode, errors.CloseCode),
    ],
    ids=["MessageType", "ErrorCode", "CloseCode"],
)
def test_every_client_constant_is_the_hubs(client_enum, hub_enum):
    hub = {m.name: m.value for m in hub_enum}
    ours = {m.name: m.value for m in client_enum}
    assert ours.items() <= hub.items(), {
        name: (value, hub.get(name)) for name, value in ours.items() if hub.get(name) != value
    }


def test_the_client_knows_every_error_and_close_code():
    # A code the client does not know would still work (a plain HubRejected),
    # but the client's error classes and reconnect policy are written for all.
    assert {c.value for c in wire.ErrorCode} == {c.value for c in errors.ErrorCode}
    assert {c.value for c in wire.CloseCode} == {c.value for c in errors.CloseCode}


def test_names_and_limits():
    assert wire.AGENT_STATUS_SPACE == names.AGENT_STATUS_SPACE
    assert wire.MAX_RECIPIENTS == messages.MAX_RECIPIENTS
    assert wire.AGENT_ID_PATTERN == names._AGENT_ID.pattern


@given(st.text(alphabet="aZ09._:-/ é", max_size=130))
def test_agent_ids_are_judged_alike(agent_id):
    assert wire.is_valid_agent_id(agent_id) == names.is_valid_agent_id(agent_id)


def test_agent_id_edges():
    for agent_id in ("a", "a" * 128, "did:key:z6Mk", "A.b_c-d:e"):
        assert wire.is_valid_agent_id(agent_id) and names.is_valid_agent_id(agent_id)
    for agent_id in ("", "a" * 129, "-a", "a b", 5, None):
        assert not wire.is_valid_agent_id(agent_id) and not names.is_valid_agent_id(agent_id)
