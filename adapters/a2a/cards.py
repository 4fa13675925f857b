"""The inbound gateway's agent cards, from who is in the space right now.

A space's card lists one skill per capability URI its members registered
(``agent.register``), each tagged with the agents offering it; a member's
card lists its own. A member that registered ``metadata.a2a = {name,
description}`` (as the outbound A2A bridge does) is described by it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from importlib import metadata as package_metadata
from typing import Any

from hub.adapter_host import AgentRecord
from protocol.a2a.card import agent_card, skills
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
