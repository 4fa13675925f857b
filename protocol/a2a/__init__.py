"""A2A (Agent2Agent protocol 1.0, JSON-RPC binding) as pure data: no sockets, no clocks.

- :mod:`.jsonrpc` — JSON-RPC 2.0 framing, the error codes, :class:`RpcError`.
- :mod:`.model` — messages, parts, task states, statuses, artifacts on the wire.
- :mod:`.tasks` — :class:`TaskRecord`, a task as the inbound gateway keeps it.
- :mod:`.mapping` — A2A messages and tasks ⇄ hub events, both directions.
- :mod:`.card` — the hub's agent cards, and reading a remote's.
- :mod:`.sse` — Server-Sent Events: framing out, decoding in.

Reference peer: PyPI ``a2a-sdk`` 1.3.0 (see ``docs/a2a.md``).
"""

from protocol.a2a.card import CardError, RemoteCard, agent_card, parse_card, skills
from protocol.a2a.jsonrpc import RpcError, RpcRequest, parse_request
from protocol.a2a.mapping import VIA, Outcome, RemoteOutcome, interpret_reply
from protocol.a2a.model import TERMINAL, Role, TaskState
from protocol.a2a.sse import SseDecoder, SseEvent
from protocol.a2a.tasks import TaskRecord, TaskRecordError

__all__ = [
    "TERMINAL",
    "VIA",
    "CardError",
    "Outcome",
    "RemoteCard",
    "RemoteOutcome",
    "Role",
    "RpcError",
    "RpcRequest",
    "SseDecoder",
    "SseEvent",
    "TaskRecord",
    "TaskRecordError",
    "TaskState",
    "agent_card",
    "interpret_reply",
    "parse_card",
    "parse_request",
    "skills",
]
