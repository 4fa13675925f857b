"""Agent cards: the hub's own (one per A2A space and member) and remote ones.

:func:`agent_card` builds what ``GET …/.well-known/agent-card.json`` serves:
one JSON-RPC interface at the URL the client reached, streaming on, text and
JSON in and out, one skill per capability URI the agents registered, and —
with auth on — a bearer-token security scheme. A card with a top-level
``url`` and no ``supportedInterfaces`` would be read as A2A 0.3 by 1.0
clients, so there is none.

:func:`parse_card` reads a remote agent's card for the outbound bridge: its
name, description, skill ids, whether it streams, and its JSON-RPC 1.x
interface URL; anything else is a :class:`CardError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import MAX_CAPABILITY

WELL_KNOWN = ".well-known/agent-card.json"
PROTOCOL_VERSION = "1.0"
BINDING = "JSONRPC"
MODES = ["text/plain", "application/json"]
BEARER = "bearer"
MAX_SKILLS = 256
MAX_TAGS = 16
MAX_TEXT = 1024


class CardError(ProtocolError):
    """A remote card the bridge cannot use."""

    def __init__(self, reason: str):
        super().__init__(ErrorCode.INVALID_REQUEST, reason)
        self.reason = reason


def skill(capability: str, agents: Iterable[str]) -> dict[str, Any]:
    """The skill a capability URI stands for; ``tags`` name the agents offering it."""
    offered = sorted(set(agents))
    name = capability.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1] or capability
    shown = ", ".join(offered[:5]) + (" …" if len(offered) > 5 else "")
    return {
        "id": capability,
        "name": name,
        "description": f"{capability}, offered by {shown}"[:MAX_TEXT],
        "tags": offered[:MAX_TAGS],
    }


def skills(capabilities: Mapping[str, Iterable[str]]) -> list[dict[str, Any]]:
    """One skill per capability (→ the agents that registered it), sorted."""
    return [skill(cap, agents) for cap, agents in sorted(capabilities.items())][:MAX_SKILLS]


def agent_card(
    *,
    name: str,
    description: str,
    url: str,
    version: str,
    skill_list: list[dict[str, Any]],
    bearer: bool,
) -> dict[str, Any]:
    card: dict[str, Any] = {
        "name": name,
        "description": description,
        "supportedInterfaces": [
            {"url": url, "protocolBinding": BINDING, "protocolVersion": PROTOCOL_VERSION}
        ],
        "version": version,
        "capabilities": {"streaming": True, "pushNotifications": False},
        "defaultInputModes": MODES,
        "defaultOutputModes": MODES,
        "skills": skill_list,
    }
    if bearer:
        card["securitySchemes"] = {
            BEARER: {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": "The hub's agent token (tokens file or JWT)",
                }
            }
        }
        card["securityRequirements"] = [{"schemes": {BEARER: {"list": []}}}]
    return card


# ── remote cards ────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class RemoteCard:
    name: str
    description: str
    skills: tuple[str, ...]
    streaming: bool
    #: The JSON-RPC 1.x interface's URL, as the card gives it.
    rpc_url: str


def _text(value: object, default: str) -> str:
    return value[:MAX_TEXT] if isinstance(value, str) and value else default


def _major(version: object) -> int | None:
    if not isinstance(version, str) or not version:
        return None
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def parse_card(card: object) -> RemoteCard:
    if not isinstance(card, dict):
        raise CardError("the agent card is not a JSON object")
    interfaces = card.get("supportedInterfaces")
    if not isinstance(interfaces, list):
        if isinstance(card.get("url"), str):
            raise CardError("the agent card is an A2A 0.3 card (no supportedInterfaces)")
        raise CardError("the agent card has no supportedInterfaces")
    rpc_url = None
    for interface in interfaces:
        if not isinstance(interface, dict) or interface.get("protocolBinding") != BINDING:
            continue
        url = interface.get("url")
        major = _major(interface.get("protocolVersion"))
        if isinstance(url, str) and major in (1, None):
            rpc_url = url
            break
    if rpc_url is None:
        raise CardError("the agent card offers no JSON-RPC interface for A2A 1.x")
    capabilities = card.get("capabilities")
    streaming = isinstance(capabilities, dict) and capabilities.get("streaming") is True
    skill_ids = []
    raw_skills = card.get("skills")
    for entry in raw_skills if isinstance(raw_skills, list) else ():
        skill_id = entry.get("id") if isinstance(entry, dict) else None
        if isinstance(skill_id, str) and 0 < len(skill_id) <= MAX_CAPABILITY:
            skill_ids.append(skill_id)
    return RemoteCard(
        name=_text(card.get("name"), "A2A agent"),
        description=_text(card.get("description"), ""),
        skills=tuple(dict.fromkeys(skill_ids))[:MAX_SKILLS],
        streaming=streaming,
        rpc_url=rpc_url,
    )
