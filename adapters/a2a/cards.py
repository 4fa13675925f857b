"""The inbound gateway's agent cards, from who is in the space right now.

A space's card lists one skill per capability URI its members registered
(``agent.register``), each tagged with the agents offering it; a member's
card lists its own. A member that registered ``metadata.a2a = {name,
description}`` (as the outbound A2A bridge does) is described by it.

The hub's own card (:func:`hub_card`, at the HTTP port's root) points to the
A2A spaces the caller may read: one skill per space (its id the space's name,
its description naming the space's URL) and one JSON-RPC interface per space,
in name order — a client that takes the first interface talks to the first
space; to talk to another, read that space's own card.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from importlib import metadata as package_metadata
from typing import Any

from hub.adapter_host import AgentRecord
from protocol.a2a.card import MAX_TEXT, agent_card, skills
from protocol.a2a.mapping import VIA


def hub_version() -> str:
    try:
        return package_metadata.version("agora-hub")
    except package_metadata.PackageNotFoundError:
        return "0"


VERSION = hub_version()


def _described(record: AgentRecord) -> tuple[str | None, str | None]:
    info = record.metadata.get("a2a") if isinstance(record.metadata, dict) else None
    info = info if isinstance(info, dict) else {}
    name, description = info.get("name"), info.get("description")
    if not isinstance(description, str):
        plain = record.metadata.get("description") if isinstance(record.metadata, dict) else None
        description = plain if isinstance(plain, str) else None
    return (name if isinstance(name, str) and name else None), description


def space_card(
    space: str,
    url: str,
    members: Sequence[AgentRecord],
    *,
    name: str | None,
    description: str | None,
    bearer: bool,
) -> dict[str, Any]:
    offered: dict[str, list[str]] = defaultdict(list)
    for record in members:
        if record.agent_id == VIA:
            continue
        for capability in record.capabilities:
            offered[capability].append(record.agent_id)
    return agent_card(
        name=name or space,
        description=description or f"The agents of the space {space!r} on Agora Hub",
        url=url,
        version=VERSION,
        skill_list=skills(offered),
        bearer=bearer,
    )


def member_card(space: str, url: str, record: AgentRecord, *, bearer: bool) -> dict[str, Any]:
    name, description = _described(record)
    return agent_card(
        name=name or record.agent_id,
        description=description or f"The agent {record.agent_id!r} of the space {space!r}",
        url=url,
        version=VERSION,
        skill_list=skills({cap: [record.agent_id] for cap in record.capabilities}),
        bearer=bearer,
    )


def hub_card(
    base: str, spaces: dict[str, tuple[str | None, str | None]], *, bearer: bool
) -> dict[str, Any]:
    """The hub's card: ``spaces`` (space → its ``a2a_name``, description) are
    those the caller may read; ``base`` is ``{http}/a2a`` as the client reached it."""
    skill_list = []
    for space, (name, description) in spaces.items():
        about = description or f"The agents of the space {space!r}"
        skill_list.append(
            {
                "id": space,
                "name": name or space,
                "description": f"{about} — A2A agent at {base}/{space}"[:MAX_TEXT],
                "tags": ["space", space],
                "examples": [f"{base}/{space}/.well-known/agent-card.json"],
            }
        )
    card = agent_card(
        name="Agora Hub",
        description="The A2A agents of this hub: one per space (see the skills)",
        url=f"{base}/{next(iter(spaces))}" if spaces else base,
        version=VERSION,
        skill_list=skill_list,
        bearer=bearer,
    )
    card["supportedInterfaces"] = [
        {"url": f"{base}/{space}", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        for space in spaces
    ]
    return card
