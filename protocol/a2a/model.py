"""A2A 1.0 objects on the wire: messages, parts, tasks, statuses, artifacts.

Spelled as the 1.0 JSON binding (and the ``a2a-sdk`` 1.3.0 library) spells
them — camelCase members, ``TASK_STATE_*`` and ``ROLE_*`` enum names, parts
without a ``kind`` (``{text}``, ``{data}``, ``{url}``, ``{raw}``). Spelling a
state the 0.3 way (``"completed"``) is read as ``TASK_STATE_UNSPECIFIED`` by
1.0 clients *silently*, so every state that leaves the hub comes from
:class:`TaskState`.

Incoming params are checked with pydantic (:func:`send_params`,
:func:`task_query`): a wrong type is :data:`~protocol.a2a.jsonrpc.INVALID_PARAMS`
naming the field. Outgoing objects are plain dicts built here.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from protocol.a2a.jsonrpc import INVALID_PARAMS, RequestId, RpcError

MAX_ID_CHARS = 256
#: ``ListTasks`` page sizes (a2a-sdk's ``DEFAULT_LIST_TASKS_PAGE_SIZE`` and maximum).
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
NEGATIVE_HISTORY = "history length must be non-negative"


class TaskState(StrEnum):
    SUBMITTED = "TASK_STATE_SUBMITTED"
    WORKING = "TASK_STATE_WORKING"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"
    COMPLETED = "TASK_STATE_COMPLETED"
    FAILED = "TASK_STATE_FAILED"
    CANCELED = "TASK_STATE_CANCELED"
    REJECTED = "TASK_STATE_REJECTED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
)
#: States in which a task waits for the client's next message.
INTERRUPTED = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})


class Role(StrEnum):
    USER = "ROLE_USER"
    AGENT = "ROLE_AGENT"


# ── incoming params ─────────────────────────────────────────────────────────

Identifier = StrictStr


class _Model(BaseModel):
    # Unknown members are ignored (later minor versions add some); known ones
    # must have the right type.
    model_config = ConfigDict(extra="ignore", strict=True)


class Part(_Model):
    text: StrictStr | None = None
    data: Any = None
    url: StrictStr | None = None
    raw: StrictStr | None = None
    mediaType: StrictStr | None = None
    filename: StrictStr | None = None
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_content(self) -> Part:
        given = self.__pydantic_fields_set__  # model_fields_set, without the property's cost
        if ("text" in given) + ("data" in given) + ("url" in given) + ("raw" in given) != 1:
            raise ValueError("a part has exactly one of text, data, url, raw")
        if self.raw is not None:
            try:
                base64.b64decode(self.raw, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("raw must be base64") from None
        return self

    def wire(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


class Message(_Model):
    messageId: StrictStr = Field(min_length=1, max_length=MAX_ID_CHARS)
    role: Literal["ROLE_USER", "ROLE_AGENT"]
    parts: list[Part] = Field(min_length=1)
    contextId: StrictStr | None = Field(default=None, min_length=1, max_length=MAX_ID_CHARS)
    taskId: StrictStr | None = Field(default=None, min_length=1, max_length=MAX_ID_CHARS)
    metadata: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        """The text parts, joined by newlines (as the a2a-sdk's ``get_user_input``)."""
        return "\n".join(p.text for p in self.parts if p.text is not None)


class _History(_Model):
    """Params with a ``historyLength`` (how many of the latest history
    messages a task is answered with; 0: none; absent: all)."""

    historyLength: StrictInt | None = None


class SendConfiguration(_History):
    returnImmediately: StrictBool = False
    taskPushNotificationConfig: dict[str, Any] | None = None
    acceptedOutputModes: list[StrictStr] | None = None


class SendParams(_Model):
    message: Message
    configuration: SendConfiguration | None = None
    metadata: dict[str, Any] | None = None


class TaskQuery(_History):
    id: StrictStr = Field(min_length=1, max_length=MAX_ID_CHARS)


class ListQuery(_History):
    """``ListTasks`` params: filters, a page, what each task carries."""

    contextId: StrictStr | None = Field(default=None, max_length=MAX_ID_CHARS)
    status: TaskState | None = None
    pageSize: StrictInt | None = None
    pageToken: StrictStr | None = Field(default=None, max_length=1024)
    statusTimestampAfter: StrictStr | None = Field(default=None, max_length=64)
    includeArtifacts: StrictBool = False

    @field_validator("status", mode="before")
    @classmethod
    def _state(cls, value: object) -> object:
        if value in (None, "", "TASK_STATE_UNSPECIFIED"):
            return None
        if not isinstance(value, str) or value not in TaskState._value2member_map_:
            raise ValueError(f"not a task state: {str(value)[:64]!r}")
        return TaskState(value)

    @property
    def after_ms(self) -> int | None:
        """``statusTimestampAfter`` in ms since the epoch (checked by :func:`list_query`)."""
        if not self.statusTimestampAfter:
            return None
        return parse_timestamp(self.statusTimestampAfter)


def _checked(model: type[_Model], params: dict[str, Any], request_id: RequestId) -> Any:
    try:
        checked = model.model_validate(params)
    except ValidationError as exc:
        raise RpcError(INVALID_PARAMS, f"Invalid params: {describe(exc)}", request_id) from None
    # isinstance, not getattr(…, None): a pydantic model's missing attribute
    # costs a raised and caught AttributeError, on every SendMessage.
    history = checked.historyLength if isinstance(checked, _History) else None
    if history is not None and history < 0:
        raise RpcError(INVALID_PARAMS, NEGATIVE_HISTORY, request_id)
    return checked


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def parse_timestamp(text: str) -> int | None:
    """An ISO 8601 timestamp (``Z`` or an offset; naive means UTC) in ms; None if it is not one."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return (moment - _EPOCH) // datetime.timedelta(milliseconds=1)


def send_params(params: dict[str, Any], request_id: RequestId, *, max_parts: int) -> SendParams:
    """``SendMessage`` / ``SendStreamingMessage`` params; ``-32602`` when wrong."""
    checked: SendParams = _checked(SendParams, params, request_id)
    history = checked.configuration.historyLength if checked.configuration else None
    if history is not None and history < 0:
        raise RpcError(INVALID_PARAMS, NEGATIVE_HISTORY, request_id)
    if len(checked.message.parts) > max_parts:
        raise RpcError(
            INVALID_PARAMS, f"Invalid params: more than {max_parts} parts in a message", request_id
        )
    return checked


def task_query(params: dict[str, Any], request_id: RequestId) -> TaskQuery:
    """``GetTask`` / ``CancelTask`` params; ``-32602`` when wrong."""
    return _checked(TaskQuery, params, request_id)  # type: ignore[no-any-return]


def list_query(params: dict[str, Any], request_id: RequestId) -> ListQuery:
    """``ListTasks`` params; ``-32602`` when wrong (as a2a-sdk: page size 1…100,
    history length not negative, a state that is one, a timestamp that is one)."""
    query: ListQuery = _checked(ListQuery, params, request_id)
    if query.pageSize is not None and not 1 <= query.pageSize <= MAX_PAGE_SIZE:
        why = "minimum page size is 1" if query.pageSize < 1 else "maximum page size is 100"
        raise RpcError(INVALID_PARAMS, why, request_id)
    if query.statusTimestampAfter and query.after_ms is None:
        raise RpcError(
            INVALID_PARAMS, "statusTimestampAfter is not an ISO 8601 timestamp", request_id
        )
    return query


def describe(exc: ValidationError) -> str:
    shown = []
    for err in exc.errors(include_url=False)[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "params"
        shown.append(f"{where}: {err['msg']}")
    return "; ".join(shown)


# ── outgoing objects ────────────────────────────────────────────────────────


def timestamp(ms: int) -> str:
    """ISO 8601 UTC with microseconds and ``Z``, as the a2a-sdk writes them.

    Every task status carries one, so the formatted second is kept and only
    the milliseconds are written for the next timestamp in the same second."""
    second, milli = divmod(ms, 1000)
    global _second
    cached, text = _second
    if cached != second:
        moment = datetime.datetime.fromtimestamp(second, tz=datetime.UTC)
        text = moment.strftime("%Y-%m-%dT%H:%M:%S")
        _second = (second, text)
    return f"{text}.{milli:03d}000Z"


#: The last second :func:`timestamp` formatted, and its text.
_second: tuple[int | None, str] = (None, "")


def text_part(text: str) -> dict[str, Any]:
    return {"text": text}


def agent_message(
    text: str, *, message_id: str, task_id: str | None = None, context_id: str | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": message_id, "role": Role.AGENT.value}
    if context_id is not None:
        message["contextId"] = context_id
    if task_id is not None:
        message["taskId"] = task_id
    message["parts"] = [text_part(text)]
    return message


def user_message(
    parts: list[dict[str, Any]],
    *,
    message_id: str,
    context_id: str | None = None,
    task_id: str | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": message_id, "role": Role.USER.value, "parts": parts}
    if context_id is not None:
        message["contextId"] = context_id
    if task_id is not None:
        message["taskId"] = task_id
    return message


def status(state: TaskState, at_ms: int, message: dict[str, Any] | None = None) -> dict[str, Any]:
    value: dict[str, Any] = {"state": state.value}
    if message is not None:
        value["message"] = message
    value["timestamp"] = timestamp(at_ms)
    return value


def artifact(artifact_id: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"artifactId": artifact_id, "parts": parts}


def status_update(task_id: str, context_id: str, status_value: dict[str, Any]) -> dict[str, Any]:
    """A streamed ``statusUpdate`` result."""
    return {"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": status_value}}


def artifact_update(
    task_id: str,
    context_id: str,
    artifact_value: dict[str, Any],
    *,
    append: bool = False,
    last_chunk: bool = False,
) -> dict[str, Any]:
    """A streamed ``artifactUpdate`` result (``append``/``lastChunk`` only when true)."""
    update: dict[str, Any] = {
        "taskId": task_id,
        "contextId": context_id,
        "artifact": artifact_value,
    }
    if append:
        update["append"] = True
    if last_chunk:
        update["lastChunk"] = True
    return {"artifactUpdate": update}
