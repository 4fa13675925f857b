"""The MCP server's bounds, with their defaults (docs/mcp.md lists them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class McpOptions:
    #: Largest request body; a bigger one is answered 413 before it is read.
    max_body_bytes: int = 2 * 1024 * 1024
    #: ``tools/call`` requests of this node running at once; one more → 503.
    max_calls: int = 256
    #: Longest ``space_ask`` ``timeout`` a caller may ask for (seconds);
    #: without one, calls wait ``bridge_timeout``.
    max_wait: float = 300.0
    #: Largest reply assembled from a streamed answer; a bigger one → isError.
    max_answer_bytes: int = 8 * 1024 * 1024
    #: Open sessions this node created (initialize); one more → 503.
    max_sessions: int = 10_000
    #: A session unused this long ends (seconds); each request extends it.
    session_ttl: float = 3600.0
    #: Notification streams (GET /mcp, subscriptions/listen) open on this node.
    max_streams: int = 1000
    #: Seconds between keep-alive comments on a notification stream; the
    #: stream also notices then that its session or client is gone.
    keepalive: float = 15.0
    #: How old the agent tools read from the members' registrations may be
    #: (seconds); membership changes in ``mcp = true`` spaces refresh at once.
    tools_ttl: float = 1.0
    #: Members read per ``mcp = true`` space for their tools.
    member_scan_limit: int = 1000
    #: Agent tools listed at most (the first, by name), and their listing's size.
    max_agent_tools: int = 1000
    max_agent_tools_bytes: int = 4 * 1024 * 1024
    #: Spaces the ``mcp`` agent stays joined to on this node for publishing
    #: and asking; past it the least recently used is left (locally).
    max_joined_spaces: int = 1000
    #: ``mcp.calls`` events waiting to be published; past it they are dropped.
    max_call_events: int = 1024
    #: Spaces listed by ``spaces_list`` at most, agents by ``agents_list``
    #: (and no more agents than fit in about ``max_frame_bytes``).
    max_listed: int = 1000
    #: Spaces one session may follow (``resources/subscribe``).
    max_subscriptions: int = 100
    #: How often the hub's spaces are read while a session stream is open
    #: here, for ``notifications/resources/list_changed`` (seconds).
    spaces_interval: float = 2.0
