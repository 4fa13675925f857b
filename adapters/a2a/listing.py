"""``ListTasks``: the caller's tasks filtered, newest first, one page at a time.

As the a2a-sdk 1.3.0 server lists them: filters ``contextId``, ``status`` (a
task state) and ``statusTimestampAfter`` (the status changed at or after it);
sorted by the status's timestamp, newest first, then by id; ``pageSize`` 1…100
(50 when absent); ``pageToken`` a cursor naming the last task of the previous
page (so a page stays right when tasks change meanwhile), ``-32602`` when it is
not one. The answer: ``tasks`` (without artifacts unless ``includeArtifacts``,
history cut to ``historyLength``), ``nextPageToken`` (``""`` on the last page),
``pageSize`` (the tasks on this page) and ``totalSize`` (all that match).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from protocol.a2a import jsonrpc
from protocol.a2a.jsonrpc import RequestId, RpcError
from protocol.a2a.model import DEFAULT_PAGE_SIZE, ListQuery
from protocol.a2a.tasks import TaskRecord

Key = tuple[int, str]
#: How a listed task is shown: ``(record, historyLength, includeArtifacts)``.
Wire = Callable[..., dict[str, Any]]


def _key(record: TaskRecord) -> Key:
    return record.updated_ms, record.id


def encode_token(record: TaskRecord) -> str:
    """The cursor after ``record``, spelled as a2a-sdk spells its own (ns, id)."""
    payload = orjson.dumps({"ts": record.updated_ms * 1_000_000, "id": record.id})
    return base64.urlsafe_b64encode(payload).decode().rstrip("=")


def decode_token(token: str, rpc_id: RequestId) -> Key:
    try:
        value = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError):
        value = None
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("ts"), int)
        or isinstance(value.get("ts"), bool)
        or not isinstance(value.get("id"), str)
        or not value["id"]
    ):
        raise RpcError(jsonrpc.INVALID_PARAMS, f"Invalid page token: {token[:64]}", rpc_id)
    return value["ts"] // 1_000_000, value["id"]


def page(
    records: Iterable[TaskRecord],
    query: ListQuery,
    rpc_id: RequestId,
    *,
    to: str | None = None,
    wire: Wire | None = None,
) -> dict[str, Any]:
    """The ``ListTasks`` result for ``records`` (all the caller may list).
    ``to``: only the tasks sent to that member (its own URL was called).
    ``wire``: how a task is shown (default: as stored; the gateway passes
    one that adds a reply streaming on this node, as ``GetTask`` shows it)."""
    after = query.after_ms
    matching = [
        r
        for r in records
        if (to is None or r.to == to)
        and (query.contextId in (None, "") or r.context_id == query.contextId)
        and (query.status is None or r.state is query.status)
        and (after is None or r.updated_ms >= after)
    ]
    matching.sort(key=_key, reverse=True)
    start = 0
    if query.pageToken:
        cursor = decode_token(query.pageToken, rpc_id)
        start = next((i for i, r in enumerate(matching) if _key(r) < cursor), len(matching))
    size = query.pageSize or DEFAULT_PAGE_SIZE
    shown = matching[start : start + size]
    show = wire if wire is not None else TaskRecord.wire
    more = start + size < len(matching)
    return {
        "tasks": [show(r, query.historyLength, artifacts=query.includeArtifacts) for r in shown],
        "nextPageToken": encode_token(shown[-1]) if more and shown else "",
        "pageSize": len(shown),
        "totalSize": len(matching),
    }
