"""HTTP Agora bridge (contract §9): inbound routes and outbound agents.

* :class:`~adapters.agora_http.inbound.AgoraHttpInbound` — ``POST /agora/{space}``
  and friends on the HTTP port for the spaces declared with ``agora_http = true``.
* :class:`~adapters.agora_http.outbound.AgoraHttpOutbound` — one per
  ``[[bridges.agora_http]]``: a member of a space that calls a remote HTTP Agora
  agent for the events addressed to it.

:func:`adapters_for` builds them from the settings, reading every Protocol
Document file up front so that a missing or unreadable one stops the hub at
start (:class:`~hub.errors.ConfigError`) rather than at the first request.
Relative paths are taken from the working directory of the hub process.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import structlog

from adapters.agora_http.config import AgoraHttpBridge
from adapters.agora_http.inbound import INBOUND_AGENT, AgoraHttpInbound, InboundOptions
from adapters.agora_http.outbound import AgoraHttpOutbound, OutboundOptions
from adapters.agora_http.protocols import describe_document, documents_by_hash
from adapters.config import of_kind
from hub.adapter_host import ConfigError
from protocol.agora_http import MAX_SOURCE_BYTES
from protocol.names import SpaceKind, is_valid_agent_id, space_kind

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pydantic import BaseModel

    from hub.adapter_host import Adapter, HubSettings

__all__ = [
    "INBOUND_AGENT",
    "AgoraHttpBridge",
    "AgoraHttpInbound",
    "AgoraHttpOutbound",
    "InboundOptions",
    "OutboundOptions",
    "adapters_for",
    "read_document",
]

log = structlog.get_logger("adapters.agora_http")


def read_document(path: Path, what: str) -> str:
    """A Protocol Document file's text; a :class:`ConfigError` naming ``what`` if
    it cannot be used. A document that is not well formed is served anyway (it is
    named by its hash) and the reason logged."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read protocol document {path}: {exc}") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise ConfigError(f"{what}: protocol document {path} exceeds {MAX_SOURCE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what}: protocol document {path} is not UTF-8") from None
    reason = describe_document(text)
    if reason is not None:
        log.warning("protocol document is not well formed", path=str(path), reason=reason)
    return text


def _check_bridge(space: str, agent_id: str, url: str, what: str) -> None:
    try:
        kind = space_kind(space)
    except Exception:
        kind = None
    if kind is not SpaceKind.PUBLIC:
        raise ConfigError(f"{what}: space {space!r} is not a user space name")
    if not is_valid_agent_id(agent_id) or agent_id == INBOUND_AGENT:
        raise ConfigError(f"{what}: agent_id {agent_id!r} is not a usable agent id")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what}: url must be an http:// or https:// URL, not {url!r}")
    if parts.query or parts.fragment:
        raise ConfigError(f"{what}: url must have no query or fragment")


def adapters_for(settings: HubSettings, bridges: Mapping[str, list[BaseModel]]) -> list[Adapter]:
    adapters: list[Adapter] = []
    spaces = {}
    for declared in settings.spaces:
        if not declared.agora_http:
            continue
        what = f"[[spaces]] {declared.id}"
        texts = [read_document(path, what) for path in declared.agora_protocols]
        spaces[declared.id] = documents_by_hash(texts)
    # Even without a space to serve: its routes answer /agora/* with the spec's
    # JSON failure (404), not the HTTP server's plain-text page.
    adapters.append(AgoraHttpInbound(spaces))
    seen: set[str] = set()
    for n, bridge in enumerate(of_kind(bridges, "agora_http", AgoraHttpBridge)):
        what = f"[[bridges.agora_http]] #{n + 1}"
        _check_bridge(bridge.space, bridge.agent_id, bridge.url, what)
        if bridge.agent_id in seen:
            raise ConfigError(f"{what}: agent_id {bridge.agent_id!r} is used twice")
        seen.add(bridge.agent_id)
        document = None
        if bridge.protocol_document is not None:
            document = read_document(bridge.protocol_document, what)
        outbound = AgoraHttpOutbound(
            bridge.space, bridge.agent_id, bridge.url, document=document, timeout=bridge.timeout
        )
        adapters.append(outbound)
    return adapters
