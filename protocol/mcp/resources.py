"""Spaces as MCP resources: their URIs and the results of the ``resources/*`` methods.

A space is the resource ``agora://spaces/{space}`` (the one resource template);
reading it gives its latest events as JSON, the same value ``space_history``
returns. Which spaces a caller may list, read or follow is the hub's policy,
not this module's.
"""

from __future__ import annotations

from typing import Any

from protocol.errors import ProtocolError
from protocol.names import space_kind

SCHEME = "agora"
PREFIX = "agora://spaces/"
TEMPLATE = PREFIX + "{space}"
MIME = "application/json"
#: JSON-RPC error of an unknown resource (MCP's own code).
RESOURCE_NOT_FOUND = -32002
#: Longest URI looked at.
MAX_URI = 512


def space_uri(space: str) -> str:
    return PREFIX + space  # space names are [a-z0-9_.-]: nothing to escape


def space_of(uri: object) -> str | None:
    """The space a resource URI names, or None when it names none."""
    if not isinstance(uri, str) or len(uri) > MAX_URI or not uri.startswith(PREFIX):
        return None
    space = uri[len(PREFIX) :]
    try:
        space_kind(space)
    except ProtocolError:
        return None
    return space


def space_resource(space: dict[str, Any]) -> dict[str, Any]:
    """A ``resources/list`` entry for one entry of ``space.list``."""
    space_id = str(space["id"])
    members = space.get("member_count")
    kind = space.get("type")
    about = f"Space {space_id!r}"
    if isinstance(kind, str):
        about += f" ({kind})"
    if isinstance(members, int):
        about += f", {members} member" + ("" if members == 1 else "s")
    return {
        "uri": space_uri(space_id),
        "name": space_id,
        "title": f"Space {space_id}",
        "description": about + ": its latest events, oldest first.",
        "mimeType": MIME,
    }


def resources_list_result(spaces: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resources": [space_resource(s) for s in spaces]}


def templates_list_result() -> dict[str, Any]:
    return {
        "resourceTemplates": [
            {
                "uriTemplate": TEMPLATE,
                "name": "space",
                "title": "A space of the hub",
                "description": "The latest events of a space, oldest first (JSON).",
                "mimeType": MIME,
            }
        ]
    }


def read_result(uri: str, text: str) -> dict[str, Any]:
    """``resources/read``: one text content, the space's history as JSON."""
    return {"contents": [{"uri": uri, "mimeType": MIME, "text": text}]}


def updated(uri: str) -> dict[str, Any]:
    """The params of ``notifications/resources/updated``."""
    return {"uri": uri}
