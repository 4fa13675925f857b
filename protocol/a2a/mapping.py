"""A2A messages and tasks ⇄ hub events, both directions (contract §13).

*Inbound* (an A2A client calls an agent on the hub): a message becomes the
``data`` of a ``space.event`` (:func:`request_data`); the agent's reply event
(``data.in_reply_to``) becomes the task's outcome (:func:`interpret_reply`).

*Outbound* (an agent on the hub calls a remote A2A agent): an event's ``data``
becomes the parts of an A2A message (:func:`outbound_parts`); the remote's
task or message becomes the reply event's ``data`` (:func:`remote_outcome`,
:func:`success_data`, :func:`failure_data`, :func:`input_required_data`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

from protocol.a2a.model import Message, TaskState, text_part

#: ``data.via`` of the events the gateway publishes; also its virtual agent's id.
VIA = "a2a"
INPUT_REQUIRED = "input-required"
#: ``data.state`` of a reply saying the agent works on the request in the background.
WORKING = "working"
MAX_ERROR_CHARS = 1024


# ── inbound: A2A → events → A2A ─────────────────────────────────────────────


def request_data(task_id: str, context_id: str, message: Message, caller: str) -> dict[str, Any]:
    """The ``data`` of the event a ``SendMessage`` publishes."""
    return {
        "via": VIA,
        "task_id": task_id,
        "context_id": context_id,
        "message_id": message.messageId,
        "text": message.text,
        "parts": [part.wire() for part in message.parts],
        "caller": caller,
    }


def cancel_data(task_id: str, in_reply_to: str | None = None) -> dict[str, Any]:
    """What agents are told when the client cancels a task (``in_reply_to``:
    the request event of the turn in progress, contract §19)."""
    data: dict[str, Any] = {"via": VIA, "task_id": task_id, "cancel": True}
    if in_reply_to is not None:
        data["in_reply_to"] = in_reply_to
    return data


def is_working(data: dict[str, Any]) -> bool:
    """Is this reply a progress note (``state: "working"``) rather than the answer?"""
    return data.get("state") == WORKING and data.get("status") not in ("failure", "error")


def working_note(data: dict[str, Any]) -> str | None:
    """The text of a progress note, if it has one."""
    text = data.get("text")
    return text[:MAX_ERROR_CHARS] if isinstance(text, str) and text else None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a reply means for the task: its next state, the status message,
    and the parts of the artifact it adds (none for failures and questions)."""

    state: TaskState
    message: str | None = None
    parts: tuple[dict[str, Any], ...] = ()
    size: int = 0


def _error_text(data: dict[str, Any]) -> str:
    error = data.get("error", data.get("message"))
    if error is None:
        return "The agent reported a failure"
    text = error if isinstance(error, str) else orjson.dumps(error).decode()
    return text[:MAX_ERROR_CHARS]


def reply_state(data: dict[str, Any]) -> tuple[TaskState, str | None]:
    """The state a reply (or a streamed reply's first delta) asks for."""
    if data.get("status") in ("failure", "error"):
        return TaskState.FAILED, _error_text(data)
    if data.get("state") == INPUT_REQUIRED:
        return TaskState.INPUT_REQUIRED, None
    return TaskState.COMPLETED, None


def interpret_reply(data: dict[str, Any]) -> Outcome:
    """A whole reply event's ``data`` → the task's outcome.

    ``status: "failure"`` (+ ``error``) fails the task; ``state:
    "input-required"`` asks the client for more (``text`` is the question);
    otherwise ``text`` (or a string ``body``) becomes a text part and ``data``
    (or a JSON ``body``) a data part of one artifact, and the task completes.
    """
    state, error = reply_state(data)
    text = data.get("text")
    if state is TaskState.FAILED:
        return Outcome(state, error)
    if state is TaskState.INPUT_REQUIRED:
        return Outcome(state, text if isinstance(text, str) else None)
    parts: list[dict[str, Any]] = []
    size = 0
    body = data.get("body")
    if not isinstance(text, str) and isinstance(body, str):
        text = body
    if isinstance(text, str):
        parts.append(text_part(text))
        size += len(text.encode("utf-8", "surrogatepass"))
    value = data["data"] if "data" in data else body if not isinstance(body, str) else None
    if value is not None:
        parts.append({"data": value})
        size += len(orjson.dumps(value))
    return Outcome(state, None, tuple(parts), size)


# ── outbound: events → A2A → events ─────────────────────────────────────────


def outbound_parts(data: dict[str, Any]) -> list[dict[str, Any]]:
    """An event's ``data`` as A2A parts: a text part from ``text`` (or a string
    ``body``), a data part from ``data`` (or a JSON ``body``). Empty when the
    event carries nothing to send."""
    parts: list[dict[str, Any]] = []
    text, body = data.get("text"), data.get("body")
    if isinstance(text, str):
        parts.append(text_part(text))
    elif isinstance(body, str):
        parts.append(text_part(body))
    if "data" in data and data["data"] is not None:
        parts.append({"data": data["data"]})
    elif body is not None and not isinstance(body, str):
        parts.append({"data": body})
    return parts


def _parts(value: object) -> list[dict[str, Any]]:
    return [p for p in value if isinstance(p, dict)] if isinstance(value, list) else []


def parts_text(parts: list[dict[str, Any]]) -> str:
    """The text of parts: text parts as they are, every other part (data,
    url, raw, or a kind A2A 1.0 does not define) as its JSON, so nothing the
    remote sent is dropped silently — nor kept back to go out as one event."""
    out = []
    for part in parts:
        text = part.get("text")
        out.append(text if isinstance(text, str) else orjson.dumps(part).decode())
    return "".join(out)


def split_parts(parts: list[dict[str, Any]]) -> tuple[str | None, Any]:
    """``(text, data)`` of parts: the text parts joined (None when there are
    none) and the data parts' values (one value, a list of several, or None).
    URL and raw parts are kept as their JSON objects among the data."""
    texts = [p["text"] for p in parts if isinstance(p.get("text"), str)]
    values = [p["data"] if "data" in p else p for p in parts if "text" not in p]
    data = None if not values else values[0] if len(values) == 1 else values
    return ("".join(texts) if texts else None), data


def status_text(task: dict[str, Any]) -> str | None:
    """The text of a task's status message, if it has one."""
    status = task.get("status")
    message = status.get("message") if isinstance(status, dict) else None
    if not isinstance(message, dict):
        return None
    return parts_text(_parts(message.get("parts"))) or None


def task_state(task: dict[str, Any]) -> str | None:
    status = task.get("status")
    state = status.get("state") if isinstance(status, dict) else None
    return state if isinstance(state, str) else None


@dataclass(frozen=True, slots=True)
class RemoteOutcome:
    """What a remote's final answer means for the sender."""

    kind: Literal["success", "failure", "input-required"]
    text: str | None = None
    data: Any = None
    error: str | None = None


def remote_outcome(task: dict[str, Any]) -> RemoteOutcome | None:
    """A remote task's outcome, or None while it is still running."""
    state = task_state(task)
    if state == TaskState.COMPLETED:
        parts = [p for a in _parts(task.get("artifacts")) for p in _parts(a.get("parts"))]
        text, data = split_parts(parts)
        if text is None and data is None:
            text = status_text(task)
        return RemoteOutcome("success", text, data)
    if state in (TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED):
        if state == TaskState.AUTH_REQUIRED:
            return RemoteOutcome("failure", error="The remote agent requires authentication")
        return RemoteOutcome("input-required", text=status_text(task) or "")
    if state in (TaskState.FAILED, TaskState.REJECTED, TaskState.CANCELED):
        reason = status_text(task) or f"The remote task ended {state}"
        return RemoteOutcome("failure", error=reason[:MAX_ERROR_CHARS])
    return None


def message_outcome(message: dict[str, Any]) -> RemoteOutcome:
    """A remote that answered with a message rather than a task."""
    text, data = split_parts(_parts(message.get("parts")))
    return RemoteOutcome("success", text, data)


def reply_data(
    in_reply_to: str, outcome: RemoteOutcome, task_id: str | None, context_id: str | None
) -> dict[str, Any]:
    """The ``data`` of the event answering a sender with ``outcome``."""
    if outcome.kind == "success":
        return success_data(in_reply_to, outcome.text, outcome.data, task_id, context_id)
    if outcome.kind == "input-required" and task_id is not None:
        return input_required_data(in_reply_to, task_id, context_id, outcome.text or "")
    return failure_data(in_reply_to, outcome.error or "failed", task_id, context_id)


def success_data(
    in_reply_to: str,
    text: str | None,
    data: Any,
    task_id: str | None,
    context_id: str | None,
) -> dict[str, Any]:
    reply: dict[str, Any] = {"in_reply_to": in_reply_to, "status": "success"}
    if text is not None:
        reply["text"] = text
    if data is not None:
        reply["data"] = data
    reply["task_id"] = task_id
    reply["context_id"] = context_id
    return reply


def failure_data(
    in_reply_to: str, error: str, task_id: str | None = None, context_id: str | None = None
) -> dict[str, Any]:
    reply: dict[str, Any] = {"in_reply_to": in_reply_to, "status": "failure", "error": error}
    if task_id is not None:
        reply["task_id"] = task_id
    if context_id is not None:
        reply["context_id"] = context_id
    return reply


def input_required_data(
    in_reply_to: str, task_id: str, context_id: str | None, text: str
) -> dict[str, Any]:
    return {
        "in_reply_to": in_reply_to,
        "state": INPUT_REQUIRED,
        "task_id": task_id,
        "context_id": context_id,
        "text": text,
    }
