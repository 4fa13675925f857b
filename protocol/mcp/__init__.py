"""MCP (Model Context Protocol) as pure data: no sockets, no clocks, no hub.

- :mod:`.jsonrpc` — JSON-RPC 2.0 framing, error codes, SSE framing of a message.
- :mod:`.revisions` — the protocol revisions served (the ``initialize``
  handshake ones and the stateless 2026-07-28) and the stateless envelope checks.
- :mod:`.tools` — the hub's tools (names, JSON Schemas, argument checks) and the
  tools agents offer (``{agent_id}.{name}``).
- :mod:`.results` — results of ``initialize``, ``server/discover``,
  ``tools/list`` and ``tools/call``.
- :mod:`.content` — the content blocks an agent's tool may answer (checked).
- :mod:`.resources` — spaces as resources: ``agora://spaces/{space}`` and the
  ``resources/*`` results.
"""

from protocol.mcp.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    ClientReply,
    JsonRpcError,
    Message,
    Notification,
    Request,
    parse_message,
)
from protocol.mcp.revisions import (
    HANDSHAKE_REVISIONS,
    LATEST_HANDSHAKE,
    MODERN_REVISIONS,
    negotiate,
)
from protocol.mcp.tools import (
    HUB_TOOL_NAMES,
    AgentTool,
    ToolArgumentError,
    agent_tool_name,
    hub_tools,
    offered_tools,
    parse_arguments,
)

__all__ = [
    "HANDSHAKE_REVISIONS",
    "HUB_TOOL_NAMES",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "LATEST_HANDSHAKE",
    "METHOD_NOT_FOUND",
    "MODERN_REVISIONS",
    "PARSE_ERROR",
    "AgentTool",
    "ClientReply",
    "JsonRpcError",
    "Message",
    "Notification",
    "Request",
    "ToolArgumentError",
    "agent_tool_name",
    "hub_tools",
    "negotiate",
    "offered_tools",
    "parse_arguments",
    "parse_message",
]
