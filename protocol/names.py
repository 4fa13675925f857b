"""Naming rules for agent ids and spaces (contract §2, §3)."""

from __future__ import annotations

import re
from enum import StrEnum

from protocol.errors import ErrorCode, ProtocolError

MAX_AGENT_ID = 128
MAX_SPACE_NAME = 128
MAX_EVENT_ID = 128

# did:key ids fit: "did:key:z6Mk…" is alphanumerics, colons and dots.
_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_USER_SPACE = re.compile(r"[a-z0-9_-]+|task\.[a-z0-9_.-]+")
_SYSTEM_SPACE = re.compile(r"(?:agent|file|mcp)\.[a-z0-9_.-]+")
# Client-chosen stream ids: printable, no "/" (the hub uses it as namespace separator).
_EVENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")

AGENT_STATUS_SPACE = "agent.status"


class SpaceKind(StrEnum):
    """The ``type`` a space has in ``space.list``."""

    PUBLIC = "public"
    SYSTEM = "system"


def is_valid_agent_id(agent_id: object) -> bool:
    return isinstance(agent_id, str) and _AGENT_ID.fullmatch(agent_id) is not None


def space_kind(name: object) -> SpaceKind:
    """Classify a space name, or raise ``INVALID_REQUEST`` for a bad one."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_SPACE_NAME:
        raise ProtocolError(
            ErrorCode.INVALID_REQUEST, f"space name must be 1-{MAX_SPACE_NAME} characters"
        )
    if _USER_SPACE.fullmatch(name):
        return SpaceKind.PUBLIC
    if _SYSTEM_SPACE.fullmatch(name):
        return SpaceKind.SYSTEM
    raise ProtocolError(
        ErrorCode.INVALID_REQUEST,
        f"invalid space name {name!r}: use [a-z0-9_-]+ or task.[a-z0-9_.-]+",
    )


def is_system_space(name: str) -> bool:
    return name.startswith(("agent.", "file.", "mcp."))


def check_event_id(event_id: object) -> str:
    """Validate a client-chosen stream ``event_id``."""
    if isinstance(event_id, str) and _EVENT_ID.fullmatch(event_id):
        return event_id
    raise ProtocolError(
        ErrorCode.INVALID_REQUEST,
        f"event_id must be 1-{MAX_EVENT_ID} characters of [A-Za-z0-9._:-]",
    )
