"""MCP server (contract §14): the hub as one MCP server for any MCP host.

* :class:`~adapters.mcp.server.McpServer` — ``POST``/``GET``/``DELETE /mcp``
  on the HTTP port (Streamable HTTP: the ``initialize`` handshake revisions
  with sessions, and the stateless 2026-07-28 revision).
* :mod:`~adapters.mcp.calls` — the hub's tools and the agents' tools, run as
  the shared virtual agent ``mcp`` (:mod:`~adapters.mcp.agent`).
* :mod:`~adapters.mcp.catalog` — the tools members of ``mcp = true`` spaces offer.
* :mod:`~adapters.mcp.resources` — spaces as resources: list, read, follow live.
* :mod:`~adapters.mcp.progress` — ``notifications/progress`` of a streamed reply,
  and the calls ``notifications/cancelled`` stops.
* :mod:`~adapters.mcp.streams` — the notification streams (``GET /mcp``,
  ``subscriptions/listen``).
* :mod:`~adapters.mcp.calllog` — the system space ``mcp.calls``.

The wire (JSON-RPC, revisions, tool schemas, results) is pure, in
:mod:`protocol.mcp`. :func:`adapters_for` hosts the server whenever the
setting ``mcp_server`` is on (the HTTP port is always served).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.mcp.agent import MCP_AGENT
from adapters.mcp.calllog import CALLS_SPACE
from adapters.mcp.options import McpOptions
from adapters.mcp.server import McpServer

if TYPE_CHECKING:
    from hub.adapter_host import Adapter, HubSettings

__all__ = ["CALLS_SPACE", "MCP_AGENT", "McpOptions", "McpServer", "adapters_for"]


def adapters_for(settings: HubSettings) -> list[Adapter]:
    if not settings.mcp_server:
        return []
    spaces = [declared.id for declared in settings.spaces if declared.mcp]
    return [McpServer(spaces, allowed_origins=settings.allowed_origins)]
