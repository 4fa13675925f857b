"""One call of an outbound A2A bridge: an addressed event → the remote → the answer.

:class:`Call` sends the event's content as an A2A message
(``SendStreamingMessage`` when the card says the remote streams, else
``SendMessage``) and publishes what comes back, addressed to the sender
(contract §13):

* streamed artifact chunks → a client stream (:class:`~adapters.a2a.relay.ReplyStream`)
  whose first delta carries ``{in_reply_to, task_id, context_id}``;
* a plain answer → one event ``{in_reply_to, status: "success", text | data,
  task_id, context_id}``;
* ``FAILED`` / ``REJECTED`` / ``CANCELED``, or a remote that cannot be reached
  or answers nonsense → ``{in_reply_to, status: "failure", error}`` (an open
  stream is cancelled first);
* ``INPUT_REQUIRED`` → ``{in_reply_to, state: "input-required", task_id, text}``;
  the sender's next event carrying that ``task_id`` continues the task.

A call is an asyncio task of its own: the sender's cancel (``data.cancel``)
interrupts it (:meth:`Call.interrupt`) and ``CancelTask`` goes to the remote.
A call is bounded: ``max_reply_bytes`` of parts (every part, of any kind, at
its JSON size), ``timeout`` of silence between stream events, and ``max_time``
in all; past a bound it ends with a failure and is marked :attr:`Call.abandoned`
(the bridge then sends ``CancelTask``).
:class:`CallTable` keeps a bridge's calls in progress, to find the one a
cancel names and the stream a refusal from the hub is about.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from adapters.a2a.relay import ReplyStream, Sender
from adapters.a2a.remote import RemoteAgent, RemoteFailure
from protocol.a2a.mapping import (
    RemoteOutcome,
    message_outcome,
    parts_text,
    remote_outcome,
    split_parts,
    task_state,
)
from protocol.a2a.model import TERMINAL, user_message

#: How often a task a non-streaming remote left running is looked at again.
POLL_INTERVAL = 0.5
CANCELLED = "Cancelled"


@dataclass(frozen=True, slots=True)
class Request:
    """What the bridge was asked: the event, and where the answer goes."""

    event_id: str
    sender: str
    space: str
    parts: list[dict[str, Any]]
    #: The remote context to use (None: the remote makes one).
    context_id: str | None
    #: The remote task this message continues (``INPUT_REQUIRED``), if any.
    task_id: str | None
    #: The sender's name for the context (``data.context_id``), if it gave one.
    context_name: str | None = None
    #: The sender's own id for the task (a ``data.task_id`` naming no task
    #: waiting for input — the hub's A2A gateway sends its task's): the remote
    #: task may be continued by it too.
    alias: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """How a call ended: the remote's outcome and ids, and whether it was
    already published as a stream (only the ending is left to say)."""

    outcome: RemoteOutcome
    task_id: str | None
    context_id: str | None
    streamed: ReplyStream | None = None


class Call:
    def __init__(
        self,
        request: Request,
        remote: RemoteAgent,
        member: Sender,
        *,
        streaming: bool,
        flush_interval: float,
        max_reply_bytes: int,
        max_time: float,
        on_stream: Callable[[ReplyStream | None], None],
    ):
        self.request = request
        self.remote = remote
        self.streaming = streaming
        self.flush_interval = flush_interval
        self.max_reply_bytes = max_reply_bytes
        self.max_time = max_time
        #: The remote task, once the remote named it.
        self.task_id: str | None = request.task_id
        self.context_id: str | None = request.context_id
        #: Set when the sender cancelled the call (:meth:`interrupt`).
        self.interrupted = False
        #: Set when the remote could not be reached at all.
        self.unreachable = False
        #: Set when the call ended at a bound (reply bytes, time): the remote
        #: task is left running unless cancelled.
        self.abandoned = False
        #: Set when the sender stopped waiting: nothing more is answered.
        self.quiet = False
        self._member = member
        self._on_stream = on_stream
        self._stream: ReplyStream | None = None
        self._task: asyncio.Task[Answer] | None = None

    @property
    def stream(self) -> ReplyStream | None:
        return self._stream

    async def outcome(self) -> Answer:
        """Run the call to its end. If the sender interrupts it, the answer is
        a failure ("Cancelled"); if the caller is cancelled, so is the call."""
        self._task = asyncio.get_running_loop().create_task(self._run())
        try:
            return await self._task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not self.interrupted or (current is not None and current.cancelling()):
                raise
            return self._answer(RemoteOutcome("failure", error=CANCELLED))

    def interrupt(self, *, quiet: bool = False) -> None:
        """The sender cancelled: stop talking to the remote (``quiet``: it
        stopped waiting, nothing is to be answered)."""
        self.interrupted = True
        self.quiet = self.quiet or quiet
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> Answer:
        message = user_message(
            self.request.parts,
            message_id=str(uuid.uuid4()),
            context_id=self.context_id,
            task_id=self.task_id,
        )
        try:
            async with asyncio.timeout(self.max_time):
                if self.streaming:
                    return await self._streamed({"message": message})
                return await self._blocking({"message": message})
        except RemoteFailure as exc:
            self.unreachable = exc.unreachable
            return self._answer(RemoteOutcome("failure", error=exc.reason))
        except TimeoutError:  # max_time: a remote that talks forever
            self.abandoned = True
            return self._answer(RemoteOutcome("failure", error="Timeout"))

    def _answer(self, outcome: RemoteOutcome, parts: Sequence[dict[str, Any]] = ()) -> Answer:
        """The call's answer. A success whose streamed chunks never went out
        (it was complete within the flush interval) becomes a plain answer
        made of those chunks."""
        stream = self._stream
        if outcome.kind == "success" and parts and (stream is None or stream.discard()):
            text, data = split_parts(list(parts))
            return Answer(RemoteOutcome("success", text, data), self.task_id, self.context_id)
        return Answer(outcome, self.task_id, self.context_id, stream)

    def _ids(self, obj: dict[str, Any], task_key: str = "id") -> None:
        task_id, context_id = obj.get(task_key), obj.get("contextId")
        if isinstance(task_id, str) and task_id:
            self.task_id = task_id
        if isinstance(context_id, str) and context_id:
            self.context_id = context_id

    async def _streamed(self, params: dict[str, Any]) -> Answer:
        size = 0
        parts: list[dict[str, Any]] = []
        # Closed as soon as the call ends: the remote's stream is dropped.
        async with contextlib.aclosing(self.remote.stream(params)) as results:
            async for result in results:
                if isinstance(result.get("message"), dict):
                    self._ids(result["message"], "taskId")
                    return self._answer(message_outcome(result["message"]))
                task = result.get("task")
                if isinstance(task, dict):
                    self._ids(task)
                    outcome = remote_outcome(task)
                    if outcome is not None:
                        return self._answer(outcome, parts)
                    continue
                update = result.get("artifactUpdate")
                if isinstance(update, dict):
                    self._ids(update, "taskId")
                    chunk = _artifact_parts(update.get("artifact"))
                    parts += chunk
                    size += sum(map(_size, chunk))
                    if size > self.max_reply_bytes:
                        self.abandoned = True
                        error = f"The remote's answer exceeds {self.max_reply_bytes} bytes"
                        return self._answer(RemoteOutcome("failure", error=error))
                    text = parts_text(chunk)
                    await self._relay(text)
                    continue
                update = result.get("statusUpdate")
                if isinstance(update, dict):
                    self._ids(update, "taskId")
                    outcome = remote_outcome(update)
                    if outcome is not None:
                        return self._answer(outcome, parts)
        return self._answer(
            RemoteOutcome("failure", error="The remote ended its stream without a final status")
        )

    async def _relay(self, text: str) -> None:
        if not text:
            return
        if self._stream is None:
            first = {
                "in_reply_to": self.request.event_id,
                "task_id": self.task_id,
                "context_id": self.context_id,
            }
            self._stream = ReplyStream(
                self._member, self.request.space, first,
                flush_interval=self.flush_interval, to=self.request.sender,
            )  # fmt: skip
            self._on_stream(self._stream)
        await self._stream.write(text)

    async def _blocking(self, params: dict[str, Any]) -> Answer:
        result = await self.remote.call("SendMessage", params)
        if isinstance(result.get("message"), dict):
            self._ids(result["message"], "taskId")
            return self._answer(message_outcome(result["message"]))
        task = result.get("task")
        if not isinstance(task, dict):
            raise RemoteFailure("The remote answered neither a task nor a message")
        self._ids(task)
        # A remote may answer before the task is done: look again until it is,
        # for as long as the bridge waits for any answer.
        deadline = asyncio.get_running_loop().time() + self.remote.timeout
        while (outcome := remote_outcome(task)) is None:
            if self.task_id is None or task_state(task) in TERMINAL:
                raise RemoteFailure("The remote's task has no usable state")
            if asyncio.get_running_loop().time() >= deadline:
                raise RemoteFailure("Timeout")
            await asyncio.sleep(POLL_INTERVAL)
            task = await self.remote.call("GetTask", {"id": self.task_id})
        return self._answer(outcome)


def _artifact_parts(artifact: object) -> list[dict[str, Any]]:
    parts = artifact.get("parts") if isinstance(artifact, dict) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _size(part: dict[str, Any]) -> int:
    """What a part counts against ``max_reply_bytes``: a text part its text's
    bytes, any other part (data, file, url, raw, unknown) its JSON."""
    text = part.get("text")
    if isinstance(text, str) and len(part) == 1:
        return len(text.encode("utf-8", "surrogatepass"))
    return len(orjson.dumps(part))


class CallTable:
    """One bridge's calls in progress, and the reply streams they opened."""

    def __init__(self) -> None:
        self._calls: dict[str, Call] = {}  # request event id → its call
        self._streams: dict[str, ReplyStream] = {}  # frame id prefix → open stream

    def add(self, call: Call) -> None:
        self._calls[call.request.event_id] = call

    def remove(self, call: Call) -> None:
        self._calls.pop(call.request.event_id, None)
        if call.stream is not None:
            self._streams.pop(call.stream.prefix, None)

    def track(self, stream: ReplyStream | None) -> None:
        """A call opened a reply stream (:class:`Call`'s ``on_stream``)."""
        if stream is not None:
            self._streams[stream.prefix] = stream

    def refused(self, error: dict[str, Any]) -> None:
        """The hub refused a frame: the stream it belongs to has failed."""
        request_id = str(error.get("request_id"))
        stream = self._streams.get(request_id.rsplit(".", 1)[0] + ".")
        if stream is not None:
            stream.refused(error)

    def streaming(self, prefix: str) -> Call | None:
        """The call whose reply stream is ``prefix`` (its event id and a dot)."""
        stream = self._streams.get(prefix)
        return next((c for c in self._calls.values() if c.stream is stream), None)

    def find(self, sender: object, task_id: str | None, event_id: str | None) -> Call | None:
        """The sender's call answering ``event_id``, or working on ``task_id``
        (the remote's id, or the sender's own for it: its alias)."""
        call = self._calls.get(event_id) if event_id is not None else None
        if call is not None and call.request.sender == sender:
            return call
        if task_id is None:
            return None
        mine = (c for c in self._calls.values() if c.request.sender == sender)
        return next((c for c in mine if task_id in (c.task_id, c.request.alias)), None)
