"""A2A gateway (contract §13): the Agent2Agent protocol 1.0, JSON-RPC binding, both ways.

* :class:`~adapters.a2a.gateway.A2aGateway` — inbound: every space declared
  with ``a2a = true`` and each of its members are A2A agents at
  ``/a2a/{space}[/{agent_id}]`` on the HTTP port.
* :class:`~adapters.a2a.outbound.A2aOutbound` — outbound: one per
  ``[[bridges.a2a]]``, a member of a space that calls a remote A2A agent for
  the events addressed to it.

The wire format is :mod:`protocol.a2a`; :func:`adapters_for` builds the
adapters from the settings. See ``docs/a2a.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from adapters.a2a.config import A2aBridge
from adapters.a2a.gateway import A2aGateway, InboundOptions, SpaceCard
from adapters.a2a.outbound import A2aOutbound, OutboundOptions
from adapters.config import of_kind
from hub.adapter_host import ConfigError
from protocol.a2a.mapping import VIA
from protocol.names import SpaceKind, is_valid_agent_id, space_kind

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pydantic import BaseModel

    from hub.adapter_host import Adapter, HubSettings

__all__ = [
    "VIA",
    "A2aBridge",
    "A2aGateway",
    "A2aOutbound",
    "InboundOptions",
    "OutboundOptions",
    "SpaceCard",
    "adapters_for",
]


def _check_bridge(bridge: A2aBridge, what: str) -> None:
    try:
        kind = space_kind(bridge.space)
    except Exception:
        kind = None
    if kind is not SpaceKind.PUBLIC:
        raise ConfigError(f"{what}: space {bridge.space!r} is not a user space name")
    if not is_valid_agent_id(bridge.agent_id) or bridge.agent_id == VIA:
        raise ConfigError(f"{what}: agent_id {bridge.agent_id!r} is not a usable agent id")
    parts = urlsplit(bridge.url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what}: url must be an http:// or https:// URL, not {bridge.url!r}")
    if parts.query or parts.fragment:
        raise ConfigError(f"{what}: url must have no query or fragment")
    for name, value in bridge.headers.items():
        if not name or any(c in name + value for c in "\r\n") or ":" in name:
            raise ConfigError(f"{what}: header {name!r} is not a valid HTTP header")


def adapters_for(settings: HubSettings, bridges: Mapping[str, list[BaseModel]]) -> list[Adapter]:
    adapters: list[Adapter] = []
    spaces = {
        declared.id: SpaceCard(declared.a2a_name, declared.a2a_description or declared.description)
        for declared in settings.spaces
        if declared.a2a
    }
    if spaces:
        adapters.append(A2aGateway(spaces))
    seen: set[str] = set()
    for n, bridge in enumerate(of_kind(bridges, "a2a", A2aBridge)):
        what = f"[[bridges.a2a]] #{n + 1}"
        _check_bridge(bridge, what)
        if bridge.agent_id in seen:
            raise ConfigError(f"{what}: agent_id {bridge.agent_id!r} is used twice")
        seen.add(bridge.agent_id)
        outbound = A2aOutbound(
            bridge.space, bridge.agent_id, bridge.url, timeout=bridge.timeout,
            headers=bridge.headers,
        )  # fmt: skip
        adapters.append(outbound)
    return adapters
