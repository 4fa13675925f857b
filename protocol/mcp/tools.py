"""The tools the hub offers over MCP: its own five and the ones agents offer.

*Hub tools* have fixed names and JSON Schemas (:func:`hub_tools`);
:func:`parse_arguments` checks a call's arguments against them and returns a
typed call, or raises :class:`ToolArgumentError` — answered as a tool result
with ``isError: true``, as MCP asks for input a model can correct.

*Agent tools*: an agent in a space declared ``mcp = true`` lists what it
offers in ``agent.register`` → ``metadata.mcp_tools: [{name, description?,
inputSchema?}]``; :func:`offered_tools` reads that list (skipping entries it
cannot use) into :class:`AgentTool` values named ``{agent_id}.{name}``.
Hub tool names have no dot, so the two kinds never collide.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

from protocol.errors import ProtocolError
from protocol.names import SpaceKind, is_valid_agent_id, space_kind

SPACES_LIST = "spaces_list"
AGENTS_LIST = "agents_list"
SPACE_PUBLISH = "space_publish"
SPACE_HISTORY = "space_history"
SPACE_ASK = "space_ask"
HUB_TOOL_NAMES = (SPACES_LIST, AGENTS_LIST, SPACE_PUBLISH, SPACE_HISTORY, SPACE_ASK)

DEFAULT_HISTORY = 20
MAX_HISTORY = 100
#: Most recipients a publish may address.
MAX_RECIPIENTS = 100
#: An agent tool's own name (the part after ``{agent_id}.``).
AGENT_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_TOOLS_PER_AGENT = 64
MAX_DESCRIPTION = 2048
MAX_SCHEMA_BYTES = 16 * 1024


class ToolArgumentError(Exception):
    """Arguments a hub tool cannot take; the message says which and why."""


# ── hub tools ──────────────────────────────────────────────────────────────

_SPACE = {"type": "string", "description": 'Space name, e.g. "weather" or "task.build-42".'}
_TO = {
    "description": "Agent id, or list of agent ids, to address (all must be members).",
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_RECIPIENTS},
    ],
}


def hub_tools(max_wait: float) -> list[dict[str, Any]]:
    """The hub's tools as ``tools/list`` shows them; ``max_wait`` bounds
    ``space_ask``'s ``timeout``."""

    def tool(name: str, description: str, properties: dict[str, Any], *required: str) -> dict:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "additionalProperties": False,
        }
        if required:
            schema["required"] = list(required)
        return {"name": name, "description": description, "inputSchema": schema}

    return [
        tool(SPACES_LIST, "List the hub's spaces you may join, with their member counts.", {}),
        tool(
            AGENTS_LIST,
            "List the agents online on the hub: id, type, capabilities, metadata.",
            {
                "capability": {
                    "type": "string",
                    "description": "Only agents with this capability URI (a prefix ending in *).",
                },
                "space": {**_SPACE, "description": "Only members of this space."},
            },
        ),
        tool(
            SPACE_PUBLISH,
            "Publish an event into a space (as the hub's agent 'mcp', naming you as caller).",
            {
                "space": _SPACE,
                "text": {"type": "string", "description": "The event's text (data.text)."},
                "data": {"type": "object", "description": "More event data (JSON object)."},
                "to": _TO,
            },
            "space",
        ),
        tool(
            SPACE_HISTORY,
            "The latest events of a space, oldest first.",
            {
                "space": _SPACE,
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_HISTORY,
                    "default": DEFAULT_HISTORY,
                },
            },
            "space",
        ),
        tool(
            SPACE_ASK,
            "Ask the agents of a space: publish a request and return the first reply to it.",
            {
                "space": _SPACE,
                "text": {"type": "string", "description": "The question or request."},
                "to": _TO,
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": max_wait,
                    "description": "Seconds to wait for the reply (default: the hub's).",
                },
            },
            "space",
            "text",
        ),
    ]


@dataclass(frozen=True, slots=True)
class SpacesList:
    pass


@dataclass(frozen=True, slots=True)
class AgentsList:
    capability: str | None
    space: str | None


@dataclass(frozen=True, slots=True)
class SpacePublish:
    space: str
    data: dict[str, Any]
    to: list[str] | None


@dataclass(frozen=True, slots=True)
class SpaceHistory:
    space: str
    limit: int


@dataclass(frozen=True, slots=True)
class SpaceAsk:
    space: str
    text: str
    to: list[str] | None
    timeout: float | None


HubCall = SpacesList | AgentsList | SpacePublish | SpaceHistory | SpaceAsk


def parse_arguments(name: str, arguments: dict[str, Any], *, max_wait: float) -> HubCall:
    """``arguments`` of the hub tool ``name`` (one of :data:`HUB_TOOL_NAMES`)."""
    allowed = {
        SPACES_LIST: (),
        AGENTS_LIST: ("capability", "space"),
        SPACE_PUBLISH: ("space", "text", "data", "to"),
        SPACE_HISTORY: ("space", "limit"),
        SPACE_ASK: ("space", "text", "to", "timeout"),
    }[name]
    extra = sorted(set(arguments) - set(allowed))
    if extra:
        raise ToolArgumentError(f"unknown argument(s): {', '.join(a[:64] for a in extra[:5])}")
    if name == SPACES_LIST:
        return SpacesList()
    if name == AGENTS_LIST:
        capability = _optional_str(arguments, "capability", 512)
        space = arguments.get("space")
        return AgentsList(capability, None if space is None else _space(space))
    space = _space(arguments.get("space"))
    if name == SPACE_HISTORY:
        limit = arguments.get("limit", DEFAULT_HISTORY)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_HISTORY:
            raise ToolArgumentError(f"limit must be an integer from 1 to {MAX_HISTORY}")
        return SpaceHistory(space, limit)
    to = _recipients(arguments.get("to"))
    text = _optional_str(arguments, "text")
    if name == SPACE_PUBLISH:
        data = arguments.get("data", {})
        if not isinstance(data, dict):
            raise ToolArgumentError("data must be a JSON object")
        if text is None and "data" not in arguments:
            raise ToolArgumentError("give text, data or both")
        if "from" in data:
            raise ToolArgumentError("data.from is set by the hub")
        return SpacePublish(space, data if text is None else {**data, "text": text}, to)
    if text is None:
        raise ToolArgumentError("text is required")
    return SpaceAsk(space, text, to, _timeout(arguments.get("timeout"), max_wait))


def _space(value: Any) -> str:
    if not isinstance(value, str):
        raise ToolArgumentError("space must be a string")
    try:
        space_kind(value)
    except ProtocolError as exc:
        raise ToolArgumentError(exc.message) from None
    return value


def is_user_space(space: str) -> bool:
    return space_kind(space) is SpaceKind.PUBLIC


def _optional_str(arguments: dict[str, Any], key: str, limit: int | None = None) -> str | None:
    value = arguments.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolArgumentError(f"{key} must be a string")
    if limit is not None and len(value) > limit:
        raise ToolArgumentError(f"{key} is longer than {limit} characters")
    return value


def _recipients(value: Any) -> list[str] | None:
    if value is None:
        return None
    ids = [value] if isinstance(value, str) else value
    if not isinstance(ids, list) or not 0 < len(ids) <= MAX_RECIPIENTS:
        raise ToolArgumentError(f"to must be an agent id or a list of 1-{MAX_RECIPIENTS} of them")
    for agent_id in ids:
        if not is_valid_agent_id(agent_id):
            raise ToolArgumentError(f"to: {str(agent_id)[:130]!r} is not an agent id")
    return list(dict.fromkeys(ids))


def _timeout(value: Any, max_wait: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ToolArgumentError("timeout must be a number of seconds")
    if not 0 < value <= max_wait:
        raise ToolArgumentError(f"timeout must be above 0 and at most {max_wait:g} seconds")
    return float(value)


# ── agent tools ────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class AgentTool:
    """A tool an agent offers, in the ``mcp = true`` space it is reached through."""

    agent_id: str
    name: str
    space: str
    description: str
    input_schema: dict[str, Any]

    @property
    def full_name(self) -> str:
        return agent_tool_name(self.agent_id, self.name)

    def listing(self) -> dict[str, Any]:
        """The tool as ``tools/list`` shows it."""
        return {
            "name": self.full_name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }


def agent_tool_name(agent_id: str, name: str) -> str:
    return f"{agent_id}.{name}"


def offered_tools(agent_id: str, space: str, metadata: Any) -> list[AgentTool]:
    """The usable entries of ``metadata.mcp_tools``: a name of 1-64
    ``[A-Za-z0-9_-]``, an optional description (a string, cut to 2048
    characters) and an optional ``inputSchema`` that is a JSON Schema object
    of type ``object`` (16 KiB at most; default: any object). Others are
    skipped, as are entries past the 64th and repeated names."""
    offered = metadata.get("mcp_tools") if isinstance(metadata, dict) else None
    if not isinstance(offered, list):
        return []
    tools: dict[str, AgentTool] = {}
    for entry in offered[:MAX_TOOLS_PER_AGENT]:
        tool = _agent_tool(agent_id, space, entry)
        if tool is not None and tool.name not in tools:
            tools[tool.name] = tool
    return list(tools.values())


def _agent_tool(agent_id: str, space: str, entry: Any) -> AgentTool | None:
    if not isinstance(entry, dict):
        return None
    name = entry.get("name")
    if not isinstance(name, str) or not AGENT_TOOL_NAME.fullmatch(name):
        return None
    description = entry.get("description")
    if not isinstance(description, str):
        description = f"Tool {name!r} of agent {agent_id!r} (space {space!r})."
    schema = entry.get("inputSchema", {"type": "object"})
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    try:
        if len(orjson.dumps(schema)) > MAX_SCHEMA_BYTES:
            return None
    except TypeError:
        return None
    return AgentTool(agent_id, name, space, description[:MAX_DESCRIPTION], schema)
