"""An A2A task as the gateway keeps it: state, status message, artifacts, turns.

:class:`TaskRecord` is what the inbound gateway stores in the cluster's
key-value store (so any node answers ``GetTask``) and what it answers with
(:meth:`TaskRecord.wire`). Each *turn* is one message from the client and the
agents' answer to it; a task in ``INPUT_REQUIRED`` takes another turn when the
client's next message names it (or, once the agents said they work on it in
the background, ``WORKING``). Every state change goes through
:meth:`TaskRecord.move`, which refuses to leave a terminal state.

``history`` holds the task's messages, oldest first: each turn's message from
the client and the agents' questions and progress notes (status messages of
``INPUT_REQUIRED`` / ``WORKING``), at most :data:`MAX_HISTORY`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import orjson

from protocol.a2a.model import Role, TaskState, agent_message, artifact, status

#: Messages kept in a task's history (the oldest go first).
MAX_HISTORY = 64
#: States whose status message also goes into the history.
_NOTED = frozenset({TaskState.INPUT_REQUIRED, TaskState.WORKING})


class TaskRecordError(ValueError):
    """A stored record that cannot be read back (corrupt or of another version)."""


@dataclass(slots=True)
class TaskRecord:
    id: str
    context_id: str
    space: str
    #: The member the requests go to (``/a2a/{space}/{agent_id}``), or None: the space.
    to: str | None
    caller: str
    state: TaskState
    updated_ms: int
    #: The status message's text (a failure's reason, an input-required question).
    message: str | None = None
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    turn: int = 1
    #: The ``event_id`` of the current turn's request event.
    event_id: str | None = None
    #: Bytes of artifact text and data kept, summed over turns.
    size: int = 0
    #: The task's messages, oldest first (A2A ``Message`` objects).
    history: list[dict[str, Any]] = field(default_factory=list)
    #: When the task was created (ms since the epoch).
    created_ms: int = 0
    #: The id of the reply stream answering the current turn, once it started.
    stream_id: str | None = None
    #: The agents said they work on the current turn in the background
    #: (``state: "working"``): a next message may begin the next turn.
    background: bool = False

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    def move(self, state: TaskState, at_ms: int, message: str | None = None) -> bool:
        """Change state (and status message); False when already terminal."""
        if self.terminal:
            return False
        self.state = state
        self.message = message
        self.updated_ms = at_ms
        if message is not None and state in _NOTED:
            self.remember(self._status_message(message))
        return True

    def remember(self, message: dict[str, Any]) -> None:
        """Add a message to the history (the oldest go beyond :data:`MAX_HISTORY`)."""
        self.history.append(message)
        del self.history[:-MAX_HISTORY]

    def user_message(self, message: dict[str, Any]) -> None:
        """The client's message of this turn, as the history keeps it."""
        kept = {**message, "role": Role.USER.value, "taskId": self.id, "contextId": self.context_id}
        self.remember(kept)

    def _status_message(self, text: str) -> dict[str, Any]:
        return agent_message(
            text, message_id=f"{self.id}-status-{self.turn}-{len(self.history)}",
            task_id=self.id, context_id=self.context_id,
        )  # fmt: skip

    def add_artifact(self, artifact_id: str, parts: list[dict[str, Any]], size: int) -> None:
        self.artifacts.append(artifact(artifact_id, parts))
        self.size += size

    def status(self) -> dict[str, Any]:
        message = None
        if self.message is not None:
            message = agent_message(
                self.message,
                message_id=f"{self.id}-status-{self.turn}",
                task_id=self.id,
                context_id=self.context_id,
            )
        return status(self.state, self.updated_ms, message)

    def wire(self, history_length: int | None = None, *, artifacts: bool = True) -> dict[str, Any]:
        """The A2A ``Task`` object: its last ``history_length`` messages (None:
        all of them, 0: none), its artifacts unless ``artifacts`` is false."""
        task: dict[str, Any] = {"id": self.id, "contextId": self.context_id}
        task["status"] = self.status()
        if artifacts and self.artifacts:
            task["artifacts"] = self.artifacts
        history = self.history if history_length is None else self.history[-history_length:]
        if history and history_length != 0:
            task["history"] = history
        return task

    # ── storage ─────────────────────────────────────────────────────────

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "id": self.id,
                "context_id": self.context_id,
                "space": self.space,
                "to": self.to,
                "caller": self.caller,
                "state": self.state.value,
                "updated_ms": self.updated_ms,
                "message": self.message,
                "artifacts": self.artifacts,
                "turn": self.turn,
                "event_id": self.event_id,
                "size": self.size,
                "history": self.history,
                "created_ms": self.created_ms,
                "stream_id": self.stream_id,
                "background": self.background,
            }
        )

    @classmethod
    def from_bytes(cls, raw: bytes) -> TaskRecord:
        try:
            value = orjson.loads(raw)
            return cls(
                id=_str(value["id"]),
                context_id=_str(value["context_id"]),
                space=_str(value["space"]),
                to=value["to"] if value["to"] is None else _str(value["to"]),
                caller=_str(value["caller"]),
                state=TaskState(value["state"]),
                updated_ms=int(value["updated_ms"]),
                message=value["message"] if value["message"] is None else _str(value["message"]),
                artifacts=list(value["artifacts"]),
                turn=int(value["turn"]),
                event_id=value["event_id"],
                size=int(value["size"]),
                history=list(value.get("history") or []),
                created_ms=int(value.get("created_ms") or 0),
                stream_id=value.get("stream_id"),
                background=bool(value.get("background")),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise TaskRecordError(f"unreadable task record: {exc}") from None


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


#: The variant digit of a version 4 UUID (``10xx``) for a random hex digit, by its two low bits.
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def new_id() -> str:
    """A random (version 4) UUID as text, as ``str(uuid.uuid4())`` — without
    the ``UUID`` object, which costs several times more (every task takes two).
    122 random bits: the version digit is 4, the variant digit one of ``89ab``."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"
