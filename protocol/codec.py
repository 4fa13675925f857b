"""Frames ⇄ messages.

Inbound: :func:`decode` turns any text or binary frame into a validated
client message or raises :class:`ProtocolError` — never anything else, so a
bad frame can't escape into the connection loop.

Outbound: small builders return the encoded bytes of each hub message. Frames
that carry a ``seq`` are built as a *head* and a *tail* around the number, so
whoever assigns the sequence (the in-memory backplane or a Redis script) can
finish the frame with one concatenation and every receiver gets the same
bytes.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from pydantic import ValidationError

from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import CLIENT_MODELS, AgentInfo, ClientMessage

dumps = orjson.dumps

# Deepest nesting of objects and arrays a message may have (the message
# itself is level 1). Deeper input is refused before anything happens, so
# whatever the hub accepts it can also encode again.
MAX_DEPTH = 64
# Integers the hub carries exactly: int64 and uint64 (what orjson encodes).
# Others would silently become floats in flight, so they are refused.
MIN_INT = -(2**63)
MAX_INT = 2**64 - 1
# A run of 19+ digits is the only way to write an integer outside that range.
# JSON's digits are ASCII: [0-9], not \d (every Unicode digit, each looked up);
# the leading class lets the engine skip to a digit: 3x faster than \d{19}.
_LONG_DIGITS = re.compile(r"[0-9][0-9]{18}")


def now_ms() -> int:
    """Hub timestamps are Unix epoch milliseconds."""
    return time.time_ns() // 1_000_000


# ── inbound ─────────────────────────────────────────────────────────────────


def request_id_of(obj: object) -> str | int | None:
    if isinstance(obj, dict):
        rid = obj.get("id")
        if isinstance(rid, str | int) and not isinstance(rid, bool):
            return rid
    return None


def decode(frame: str | bytes) -> ClientMessage:
    """Parse and validate one inbound frame."""
    if not isinstance(frame, str):
        raise ProtocolError(
            ErrorCode.INVALID_REQUEST, "binary frames are not accepted: send JSON text frames"
        )
    try:
        obj = orjson.loads(frame)
    except orjson.JSONDecodeError as exc:
        raise _not_json(frame, exc) from None
    if not isinstance(obj, dict):
        raise ProtocolError(ErrorCode.INVALID_REQUEST, "a message must be a JSON object")
    rid = request_id_of(obj)
    check_json_bounds(frame, obj, rid)
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(ErrorCode.INVALID_REQUEST, "missing string field 'type'", rid)
    model = CLIENT_MODELS.get(kind)
    if model is None:
        raise ProtocolError(ErrorCode.INVALID_REQUEST, f"unknown message type {kind[:64]!r}", rid)
    try:
        return model.model_validate(obj)  # type: ignore[return-value]
    except ValidationError as exc:
        raise ProtocolError(
            ErrorCode.INVALID_REQUEST, f"invalid {kind}: {_describe(exc)}", rid
        ) from None


def addressed_delta_id(frame: str | bytes) -> str | None:
    """The ``event_id`` of a refused frame that is a ``space.event.delta``
    carrying ``to`` (whatever else is wrong with it), else None. For the
    refusal's path only: it parses the frame again."""
    try:
        obj = orjson.loads(frame)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or obj.get("type") != "space.event.delta" or "to" not in obj:
        return None
    event_id = obj.get("event_id")
    return event_id if isinstance(event_id, str) and 0 < len(event_id) <= 128 else None


def handshake_info(agent_id: str, query: Mapping[str, list[str]]) -> AgentInfo | None:
    """The agent's details declared in the ``/ws`` query, or None.

    ``type=…``, ``capability=…`` (repeated, one per capability) and
    ``metadata=…`` (a JSON object) — what ``agent.register`` would carry, known
    before the agent is announced. Raises :class:`ProtocolError` when invalid.
    """
    types, caps, metas = query.get("type", []), query.get("capability", []), query.get("metadata")
    if not (types or caps or metas):
        return None
    if len(types) > 1 or (metas is not None and len(metas) > 1):
        raise ProtocolError(ErrorCode.INVALID_REQUEST, "type and metadata may be given once")
    fields: dict[str, Any] = {"id": agent_id}
    if types:
        fields["type"] = types[0]
    if caps:
        fields["capabilities"] = caps
    if metas:
        try:
            metadata = orjson.loads(metas[0])
        except orjson.JSONDecodeError as exc:
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST, f"metadata: invalid JSON: {exc}"
            ) from None
        if not isinstance(metadata, dict):
            raise ProtocolError(ErrorCode.INVALID_REQUEST, "metadata must be a JSON object")
        check_json_bounds(metas[0], metadata)
        fields["metadata"] = metadata
    try:
        return AgentInfo.model_validate(fields)
    except ValidationError as exc:
        raise ProtocolError(ErrorCode.INVALID_REQUEST, f"invalid {_describe(exc)}") from None


def check_json_bounds(
    text: str, obj: Any, request_id: str | int | None = None, *, max_depth: int = MAX_DEPTH
) -> None:
    """Refuse JSON the hub could not carry unchanged: nesting deeper than
    ``max_depth`` (a document that will sit inside a message passes less than
    :data:`MAX_DEPTH`), integers outside int64/uint64.

    Both checks start with a C-speed scan of the text, so an ordinary message
    pays two ``str.count`` calls and one regex search.
    """
    if text.count("{") + text.count("[") > max_depth and _depth(obj, max_depth) > max_depth:
        raise ProtocolError(
            ErrorCode.INVALID_REQUEST,
            f"JSON nested deeper than {max_depth} levels",
            request_id,
        )
    if _LONG_DIGITS.search(text) is not None:
        # orjson accepted the text: json is stricter on nothing we rely on.
        try:
            literal, _ = _first_out_of_range(text)
        except (ValueError, RecursionError):
            return
        if literal is not None:
            raise _out_of_range(literal, request_id)


def _not_json(text: str, exc: orjson.JSONDecodeError) -> ProtocolError:
    """The refusal of a frame orjson could not read. A number past a double's
    range (``1e400``, hundreds of digits) is orjson's "infinity", though the
    text is valid JSON: said as what it is, with the message's ``id``."""
    if "infinity" in str(exc):
        try:
            literal, obj = _first_out_of_range(text)
        except (ValueError, RecursionError):
            literal = None
        if literal is not None:
            return _out_of_range(literal, request_id_of(obj))
    return ProtocolError(ErrorCode.INVALID_REQUEST, f"invalid JSON: {exc}")


def _first_out_of_range(text: str) -> tuple[str | None, Any]:
    """The first number in ``text`` the hub cannot carry unchanged (an integer
    outside int64/uint64, a number past a double's range), or None; and the
    document. ValueError (or RecursionError) for text that is not JSON."""
    found: list[str] = []

    def as_int(literal: str) -> int:
        # Past 20 characters no integer fits in 64 bits (nor is int() cheap).
        if len(literal) > 20 or not MIN_INT <= (value := int(literal)) <= MAX_INT:
            found.append(literal)
            return 0
        return value

    def as_float(literal: str) -> float:
        value = float(literal)
        if math.isinf(value):
            found.append(literal)
            return 0.0
        return value

    def no_constant(name: str) -> float:
        raise ValueError(f"{name} is not JSON")

    obj = json.loads(text, parse_int=as_int, parse_float=as_float, parse_constant=no_constant)
    return (found[0] if found else None), obj


def _out_of_range(literal: str, request_id: str | int | None) -> ProtocolError:
    if literal.lstrip("-").isdigit():
        what = f"integer {literal[:40]} does not fit in 64 bits"
    else:
        what = f"number {literal[:40]} does not fit in a double"
    return ProtocolError(ErrorCode.INVALID_REQUEST, f"{what}: send it as a string", request_id)


def _depth(obj: Any, limit: int) -> int:
    """Nesting depth of containers in ``obj``, stopping once past ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        node, level = stack.pop()
        if level > deepest:
            deepest = level
            if deepest > limit:
                return deepest
        if isinstance(node, dict):
            stack.extend((v, level + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, level + 1) for v in node if isinstance(v, dict | list))
    return deepest


#: Error types that only say the input was not of a union member's type.
_TYPE_ERRORS = frozenset({"string_type", "list_type", "dict_type", "int_type", "bool_type"})


def _describe(exc: ValidationError) -> str:
    """The first few errors, each ``field: why``. A union's member tags
    (``list[constrained-str]``) are left out of the field, and so is a
    member's bare type mismatch when another member says more (``to`` given
    101 ids is too long a list, not "not a string")."""
    errors = [
        ([p for p in e["loc"] if not _union_tag(p)], e["type"], e["msg"])
        for e in exc.errors(include_url=False, include_input=False)
    ]
    # Fields another member of their union says more about.
    told = {loc[0] for loc, kind, _ in errors if loc and kind not in _TYPE_ERRORS}
    parts: list[str] = []
    for loc, kind, msg in errors:
        if kind in _TYPE_ERRORS and loc and loc[0] in told:
            continue
        part = f"{'.'.join(str(p) for p in loc) or 'message'}: {msg}"
        if part not in parts:
            parts.append(part)
    return "; ".join(parts[:3])


def _union_tag(part: str | int) -> bool:
    """A loc element naming a union member's type, not a field or index."""
    return isinstance(part, str) and ("[" in part or "-" in part or part in ("str", "int"))


# ── outbound ────────────────────────────────────────────────────────────────


def _with_id(msg: dict[str, Any], request_id: str | int | None) -> dict[str, Any]:
    if request_id is not None:
        msg["id"] = request_id
    return msg


def error(code: ErrorCode | str, message: str, request_id: str | int | None = None) -> bytes:
    return dumps({"type": "error", "code": str(code), "message": message, "request_id": request_id})


def error_from(exc: ProtocolError) -> bytes:
    return error(exc.code, exc.message, exc.request_id)


def registered(
    request_id: str | int | None,
    agent_id: str,
    connection_id: str,
    heartbeat_interval_ms: int,
    heartbeat_timeout_ms: int,
) -> bytes:
    return dumps(
        _with_id(
            {
                "type": "agent.registered",
                "agent": {"id": agent_id, "connection_id": connection_id},
                "heartbeat_interval": heartbeat_interval_ms,
                "heartbeat_timeout": heartbeat_timeout_ms,
            },
            request_id,
        )
    )


def refreshed(request_id: str | int | None, expires_at: float | None) -> bytes:
    """Answers ``agent.refresh``; ``expires_at`` in epoch seconds becomes milliseconds."""
    ms = None if expires_at is None else round(expires_at * 1000)
    return dumps(_with_id({"type": "agent.refreshed", "expires_at": ms}, request_id))


def heartbeat(request_id: str | int | None = None) -> bytes:
    return dumps(_with_id({"type": "agent.heartbeat", "timestamp": now_ms()}, request_id))


def joined(
    request_id: str | int | None,
    space: str,
    members: list[str],
    count: int,
    **position: Any,
) -> bytes:
    """``position``: the space's ``epoch`` and ``seq``, and ``recovered`` after a ``since``."""
    return dumps(
        _with_id(
            {
                "type": "space.joined",
                "space": space,
                "members": members,
                "member_count": count,
                **position,
            },
            request_id,
        )
    )


def left(request_id: str | int | None, space: str) -> bytes:
    return dumps(_with_id({"type": "space.left", "space": space}, request_id))


def members(
    space: str,
    member_ids: list[str] | None,
    count: int,
    joined: str | list[str] | None,
    left: str | list[str] | None,
) -> bytes:
    """A join or leave; ``member_ids`` None leaves the array out (a big space).

    One change is the seed's shape (``joined``/``left`` an id and ``None``);
    several coalesced into one event carry lists (either may be empty)."""
    msg: dict[str, Any] = {"type": "space.members", "space": space}
    if member_ids is not None:
        msg["members"] = member_ids
    msg["member_count"] = count
    msg["joined"] = joined
    msg["left"] = left
    return dumps(msg)


def members_page(
    request_id: str | int | None,
    space: str,
    member_ids: list[str],
    count: int,
    next_cursor: str | None,
) -> bytes:
    """The reply to a ``space.members`` request."""
    return dumps(
        _with_id(
            {
                "type": "space.members",
                "space": space,
                "members": member_ids,
                "member_count": count,
                "next_cursor": next_cursor,
            },
            request_id,
        )
    )


def agent_list(
    request_id: str | int | None, agents: Iterable[Mapping[str, Any]], next_cursor: str | None
) -> bytes:
    """The reply to an ``agent.list`` request."""
    return dumps(
        _with_id(
            {"type": "agent.list", "agents": list(agents), "next_cursor": next_cursor},
            request_id,
        )
    )


def space_list(request_id: str | int | None, spaces: Iterable[Mapping[str, Any]]) -> bytes:
    return dumps(_with_id({"type": "space.list", "spaces": list(spaces)}, request_id))


def published(
    request_id: str | int | None,
    space: str,
    event_id: str,
    seq: int,
    timestamp: int,
    duplicate: bool = False,
) -> bytes:
    msg: dict[str, Any] = {
        "type": "space.published",
        "space": space,
        "event_id": event_id,
        "seq": seq,
        "timestamp": timestamp,
    }
    if duplicate:
        msg["duplicate"] = True
    return dumps(_with_id(msg, request_id))


def history(
    request_id: str | int | None,
    space: str,
    epoch: str,
    seq: int,
    frames: Iterable[bytes],
    next_before_seq: int | None,
) -> bytes:
    """``space.history``: the events are the frames as delivered, spliced in unchanged."""
    head = _with_id(
        {"type": "space.history", "space": space, "epoch": epoch, "seq": seq}, request_id
    )
    head["next_before_seq"] = next_before_seq
    return b'%s,"events":[%s]}' % (dumps(head)[:-1], b",".join(frames))


def sequenced(
    kind: str,
    space: str,
    event_id: str,
    rest: Mapping[str, Any],
    *,
    request_id: str | int | None = None,
) -> tuple[bytes, bytes]:
    """Head and tail of a frame whose ``seq`` is filled in later.

    ``head + str(seq).encode() + tail`` is the complete frame
    ``{"type":…,"space":…,"event_id":…,"seq":N, **rest}`` — and
    ``"request_id"`` after ``rest`` when the request that made it had an id.
    """
    if request_id is not None:
        rest = {**rest, "request_id": request_id}
    head = b'{"type":%s,"space":%s,"event_id":%s,"seq":' % (
        dumps(kind),
        dumps(space),
        dumps(event_id),
    )
    tail = b"," + dumps(rest)[1:] if rest else b"}"
    return head, tail


def receiver_cancelled(request_id: str | int | None, space: str, event_id: str) -> bytes:
    """Acknowledges a receiver's cancel; only that receiver gets it."""
    return dumps(
        _with_id(
            {
                "type": "space.event.cancel",
                "space": space,
                "event_id": event_id,
                "reason": "receiver_cancelled",
            },
            request_id,
        )
    )


def receivers_gone(
    space: str, event_id: str, receiver: str, reason: str, request_id: str | int | None = None
) -> bytes:
    """Tells a stream's producer that nobody receives it any more (contract
    §19): ``event_id`` is the producer's own id, ``from`` the receiver whose
    cancel (``reason`` ``receiver_cancelled``) or departure (``receivers_left``)
    ended the audience. With ``request_id``: the answer to a done or cancel of
    that stream sent after it ended so."""
    return dumps(
        _with_id(
            {
                "type": "space.event.cancel",
                "space": space,
                "event_id": event_id,
                "from": receiver,
                "timestamp": now_ms(),
                "reason": reason,
            },
            request_id,
        )
    )


def cancel_notice(space: str, event_id: str, publisher: str, reason: str) -> bytes:
    """A cancel a node makes up locally for a stream whose end never came."""
    return dumps(
        {
            "type": "space.event.cancel",
            "space": space,
            "event_id": event_id,
            "from": publisher,
            "timestamp": now_ms(),
            "reason": reason,
        }
    )


def complete(head: bytes, seq: int, tail: bytes) -> bytes:
    return b"%s%d%s" % (head, seq, tail)
