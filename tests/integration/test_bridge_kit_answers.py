"""The outbound-bridge kit on a real hub: an answer the hub refuses is not lost.

A bridge (A2A, HTTP Agora) publishes what its remote answered; when the hub
refuses that publish for what it carries (nested deeper than frames may be,
an integer beyond 64 bits), the sender gets a failure in its place (contract
§9: a bridge never loses a request silently).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from adapters.kit.bridge import OutboundBridge
from tests.support.wsclient import WsClient

SPACE = "lab"
BRIDGE = "remote"


def nested(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value}
    return value


class AnsweringBridge(OutboundBridge):
    """A bridge whose remote answers ``body`` to every request."""

    def __init__(self, body: Any):
        super().__init__(SPACE, BRIDGE, max_request_bytes=4096, max_concurrency=2, max_queued=2)
        self.body = body

    async def serve(self, event: dict[str, Any]) -> None:
        answer = {
            "in_reply_to": event["event_id"],
            "status": "success",
            "body": self.body,
            "task_id": "t-1",
        }
        await self.answer(event, answer)

    async def refuse(self, event: dict[str, Any], why: str) -> None:
        failure = {"in_reply_to": event["event_id"], "status": "failure", "error": why}
        await self.answer(event, failure)


@pytest.fixture
async def alice() -> AsyncIterator[Callable[[Any], Awaitable[WsClient]]]:
    opened: list[WsClient] = []

    async def _connect(server: Any) -> WsClient:
        client = await WsClient.connect(server.url, "alice", heartbeat=True)
        await client.join(SPACE)
        opened.append(client)
        return client

    yield _connect
    for client in opened:
        await client.close()


async def ask(client: WsClient) -> dict[str, Any]:
    mine = await client.request(
        {"type": "space.publish", "space": SPACE, "data": {"text": "hi"}, "to": BRIDGE}
    )
    sent = mine["event_id"]

    def answers(m: dict[str, Any]) -> bool:
        return m.get("type") == "space.event" and m["data"].get("in_reply_to") == sent

    answer = await client._until(answers, 10)
    assert answer["from"] == BRIDGE and answer["to"] == "alice"
    return answer


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (nested(70), "JSON nested deeper than 64 levels"),
        ({"n": 2**64}, "Integer exceeds 64-bit range"),
    ],
)
async def test_an_answer_the_hub_refuses_becomes_a_failure(hub, alice, body, why):
    server = await hub(adapters=[AnsweringBridge(body)])
    client = await alice(server)
    data = (await ask(client))["data"]
    assert "body" not in data
    assert data["status"] == "failure"
    assert data["error"] == "The remote's answer cannot be delivered: " + why
    assert data["task_id"] == "t-1"  # the sender can still name the task


async def test_an_answer_the_hub_takes_is_delivered_as_it_is(hub, alice):
    server = await hub(adapters=[AnsweringBridge(nested(60))])
    answer = await ask(await alice(server))
    assert answer["data"]["status"] == "success" and answer["data"]["body"] == nested(60)
