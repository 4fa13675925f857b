"""MCP protocol revisions and how a request says which one it speaks.

Two eras share ``POST /mcp``:

* **Handshake revisions** (2025-06-18, 2025-11-25; older ones are answered
  with the newest): ``initialize`` negotiates the revision and the server
  names a session (``Mcp-Session-Id``) that later requests carry with an
  ``MCP-Protocol-Version`` header.
* **The stateless revision** 2026-07-28: no handshake, no session. Every
  request carries ``MCP-Protocol-Version``, ``Mcp-Method`` (and ``Mcp-Name``
  for ``tools/call``) headers and the same facts in ``params._meta``;
  a client probes for it with ``server/discover``, which must be answered at
  once (the ``mcp`` client waits 10 s for a silent server before falling
  back to the handshake). :func:`check_envelope` is the validation ladder
  that revision prescribes, in its order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocol.mcp.jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    UNSUPPORTED_PROTOCOL_VERSION,
    JsonRpcError,
    Request,
)

HANDSHAKE_REVISIONS = ("2025-06-18", "2025-11-25")
#: Revisions a client may still ask for; answered with the newest handshake one.
OLDER_REVISIONS = ("2024-11-05", "2025-03-26")
LATEST_HANDSHAKE = HANDSHAKE_REVISIONS[-1]
MODERN_REVISIONS = ("2026-07-28",)
LATEST_MODERN = MODERN_REVISIONS[-1]

# Header names, lower case (aiohttp's header lookups ignore case anyway).
PROTOCOL_VERSION_HEADER = "mcp-protocol-version"
SESSION_HEADER = "mcp-session-id"
METHOD_HEADER = "mcp-method"
NAME_HEADER = "mcp-name"

# ``params._meta`` keys of the stateless revision.
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"


def negotiate(requested: object) -> str:
    """The handshake revision to answer ``initialize`` with: the client's when
    this server speaks it, else the newest (the client then decides)."""
    if isinstance(requested, str) and requested in HANDSHAKE_REVISIONS:
        return requested
    return LATEST_HANDSHAKE


def is_modern(header: str | None) -> bool:
    """Does an ``MCP-Protocol-Version`` header name the stateless revision?"""
    return header is not None and header in MODERN_REVISIONS


def handshake_header_ok(header: str | None) -> bool:
    """Is a session request's ``MCP-Protocol-Version`` header acceptable?
    Absent means the oldest revision with that transport (2025-03-26), accepted."""
    return header is None or header in HANDSHAKE_REVISIONS or header in OLDER_REVISIONS


@dataclass(frozen=True, slots=True)
class Envelope:
    """What a stateless request says about its client."""

    protocol_version: str
    client_info: Any
    client_capabilities: Any


def check_envelope(request: Request, headers: Mapping[str, str]) -> Envelope:
    """The 2026-07-28 ladder, first failing rung wins: ``params._meta`` carries
    the protocol version and client capabilities (``-32602``); the routing
    headers agree with the body (``-32020``); the version is served
    (``-32022`` with ``data = {supported, requested}``)."""
    meta = request.params.get("_meta")
    if not isinstance(meta, dict):
        raise JsonRpcError(
            INVALID_PARAMS,
            f"params._meta must be an object carrying {META_PROTOCOL_VERSION!r} and "
            f"{META_CLIENT_CAPABILITIES!r}",
            request_id=request.id,
        )
    missing = [k for k in (META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES) if k not in meta]
    if missing:
        raise JsonRpcError(
            INVALID_PARAMS,
            f"params._meta is missing {', '.join(missing)}",
            request_id=request.id,
        )
    version = meta[META_PROTOCOL_VERSION]
    if headers.get(PROTOCOL_VERSION_HEADER) != version:
        raise _mismatch(request, "MCP-Protocol-Version header differs from params._meta")
    if headers.get(METHOD_HEADER) != request.method:
        raise _mismatch(request, "Mcp-Method header differs from the method")
    if request.method == "tools/call":
        name = request.params.get("name")
        if name is not None and headers.get(NAME_HEADER) != name:
            raise _mismatch(request, "Mcp-Name header differs from params.name")
    if not isinstance(version, str):
        raise JsonRpcError(
            INVALID_PARAMS, "the protocol version must be a string", request_id=request.id
        )
    if version not in MODERN_REVISIONS:
        raise unsupported_version(request.id, version)
    return Envelope(version, meta.get(META_CLIENT_INFO), meta[META_CLIENT_CAPABILITIES])


def unsupported_version(request_id: Any, requested: str) -> JsonRpcError:
    return JsonRpcError(
        UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
        # The handshake revisions too: a client without a stateless revision in
        # common then falls back to ``initialize`` rather than giving up.
        data={"supported": [*HANDSHAKE_REVISIONS, *MODERN_REVISIONS], "requested": requested[:64]},
        request_id=request_id,
    )


def _mismatch(request: Request, message: str) -> JsonRpcError:
    return JsonRpcError(HEADER_MISMATCH, message, request_id=request.id)


#: HTTP status of a JSON-RPC error on the stateless revision (its transport
#: table); other codes, and every error of a session, go with 200.
MODERN_ERROR_STATUS = {
    -32700: 400,
    -32600: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    -32601: 404,
}
