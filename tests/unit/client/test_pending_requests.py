"""PendingRequests: a late answer to a request given up on is still known as ours."""

from __future__ import annotations

import asyncio

import pytest

from agora_client.errors import InvalidRequest
from agora_client.requests import PendingRequests


async def test_a_refusal_of_a_request_given_up_on_is_ours_once():
    pending = PendingRequests()
    rid, fut = pending.open()
    waiter = asyncio.ensure_future(fut)
    await asyncio.sleep(0)
    waiter.cancel()  # the task that made the request was cancelled…
    with pytest.raises(asyncio.CancelledError):
        await waiter
    pending.forget(rid)
    late = InvalidRequest("to names agents that are not members", request_id=rid)
    assert pending.refuse(rid, late) is True  # …its answer is not "an unknown request"
    assert pending.refuse(rid, late) is False  # and only once
    assert pending.refuse("c999", late) is False


async def test_an_answered_request_leaves_nothing_behind():
    pending = PendingRequests()
    rid, _ = pending.open()
    pending.answer(rid, {"type": "space.published", "id": rid})
    pending.forget(rid)
    assert pending.refuse(rid, InvalidRequest("x")) is False
