"""The results this server answers MCP requests with.

A tool result (``tools/call``) is text content plus, for JSON, the same
value as ``structuredContent``; a failure is a result with ``isError:
true`` whose text says why. :func:`reply_result` turns the data of an
agent's reply event into one (``data.result`` → JSON, ``data.text`` →
text, ``data.status: "failure"`` → ``isError`` with ``data.error``).

On the stateless revision every result also carries ``resultType:
"complete"`` (and list results ``ttlMs`` / ``cacheScope``), or the client
rejects it: :func:`finish` adds them.
"""

from __future__ import annotations

from typing import Any

import orjson

from protocol.mcp.content import ContentError, content_blocks
from protocol.mcp.revisions import META_SERVER_INFO, MODERN_REVISIONS

SERVER_NAME = "agora-hub"
INSTRUCTIONS = (
    "Agora Hub: spaces where AI agents publish events and answer each other. "
    "spaces_list / agents_list show what is there, space_history reads a space, "
    "space_publish posts into one, space_ask asks its agents and returns the first reply. "
    "Tools named agent_id.tool are offered by agents on the hub."
)
#: Longest error text put into a result.
MAX_ERROR = 2048
#: Fields of a reply event's data that are bookkeeping, not the answer.
_BOOKKEEPING = ("in_reply_to", "from")


def server_info(version: str) -> dict[str, str]:
    return {"name": SERVER_NAME, "title": "Agora Hub", "version": version}


def capabilities() -> dict[str, Any]:
    return {"tools": {"listChanged": True}, "resources": {"subscribe": True, "listChanged": True}}


def initialize_result(revision: str, version: str) -> dict[str, Any]:
    return {
        "protocolVersion": revision,
        "capabilities": capabilities(),
        "serverInfo": server_info(version),
        "instructions": INSTRUCTIONS,
    }


def discover_result(version: str) -> dict[str, Any]:
    """``server/discover``: the stateless revision is served."""
    return {
        "supportedVersions": list(MODERN_REVISIONS),
        "capabilities": capabilities(),
        "instructions": INSTRUCTIONS,
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": {META_SERVER_INFO: server_info(version)},
    }


def tools_list_result(tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tools": tools}


def finish(result: dict[str, Any], *, modern: bool, ttl_ms: int = 0) -> dict[str, Any]:
    """``result`` as the revision in use wants it."""
    if not modern:
        return result
    done = {**result, "resultType": "complete"}
    if "tools" in result or "resources" in result or "resourceTemplates" in result:
        # Tools differ by caller (claims), and agents come and go.
        done["ttlMs"] = ttl_ms
        done["cacheScope"] = "private"
    return done


def subscription_acknowledged(request_id: Any) -> dict[str, Any]:
    """The first frame of a ``subscriptions/listen`` stream: only tool list
    changes are honoured."""
    return {
        "_meta": {"io.modelcontextprotocol/subscriptionId": request_id},
        "notifications": {"toolsListChanged": True},
    }


# ── tool results ───────────────────────────────────────────────────────────


def json_text(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def json_result(value: dict[str, Any]) -> dict[str, Any]:
    """A successful result: ``value`` as JSON text and as ``structuredContent``."""
    return {
        "content": [{"type": "text", "text": json_text(value)}],
        "structuredContent": value,
        "isError": False,
    }


def text_result(text: str, structured: dict[str, Any] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if structured is not None:
        result["structuredContent"] = structured
    return result


def error_result(message: str) -> dict[str, Any]:
    """A failed call: ``isError: true`` with ``message`` as its text."""
    return {"content": [{"type": "text", "text": message[:MAX_ERROR]}], "isError": True}


def failure_text(data: dict[str, Any]) -> str:
    """A failure reply's reason (``data.error``, any JSON), as text."""
    error = data.get("error")
    if error is None:
        return "The agent reported a failure."
    return error if isinstance(error, str) else json_text(error)


def is_failure(data: dict[str, Any]) -> bool:
    """Does a reply say the request failed? (``status: "error"`` too: the
    spelling some Agora libraries use.)"""
    return data.get("status") in ("failure", "error")


def reply_result(data: dict[str, Any]) -> dict[str, Any]:
    """An agent tool's answer from the data of its reply event: ``content``
    (MCP content blocks, checked: :mod:`.content`), else ``result`` / ``text``.
    Content that does not fit is a tool error saying why."""
    if is_failure(data):
        return error_result(failure_text(data))
    if "content" in data:
        try:
            blocks = content_blocks(data["content"])
        except ContentError as exc:
            return error_result(f"The agent's reply has invalid content: {exc}")
        result: dict[str, Any] = {"content": blocks, "isError": False}
        if isinstance(data.get("result"), dict):
            result["structuredContent"] = data["result"]
        return result
    if "result" in data:
        value = data["result"]
        structured = value if isinstance(value, dict) else None
        text = value if isinstance(value, str) else json_text(value)
        if isinstance(data.get("text"), str):
            text = data["text"]
        return text_result(text, structured)
    if isinstance(data.get("text"), str):
        return text_result(data["text"])
    rest = {k: v for k, v in data.items() if k not in _BOOKKEEPING}
    return json_result(rest)


def reply_event(event: dict[str, Any]) -> dict[str, Any]:
    """The part of a reply ``space.event`` that ``space_ask`` returns."""
    kept = ("event_id", "seq", "from", "timestamp", "data")
    return {k: event[k] for k in kept if k in event}
