"""The bridge against the real ``agora-protocol`` 0.2.0 library, both directions.

Inbound: the library's ``SimpleSenderTransporter`` talks to the hub's
``/agora/{space}`` and an agent on the hub answers over WebSocket. Outbound: an
agent on the hub calls the library's ``ReceiverServer`` (stub receiver, no LLM)
through a ``[[bridges.agora_http]]`` agent. And the hub calling itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from protocol.agora_http import HashForm, encode_source, format_hash, hash_document
from tests.support.agora_bridge import ADDITION_DOC, Responder, call, write_config
from tests.support.wsclient import WsClient

SPACE = "math"
BRIDGE = "adder"


@pytest.fixture
async def inbound_hub(hub, tmp_path) -> Any:
    config = write_config(tmp_path / "in.toml", f'[[spaces]]\nid = "{SPACE}"\nagora_http = true\n')
    return await hub(config=config)


@pytest.fixture
async def responder(inbound_hub) -> AsyncIterator[Responder]:
    agent = await Responder(inbound_hub.url, "solver", SPACE).start()
    yield agent
    await agent.aclose()


@pytest.fixture
async def receiver(agora_peer) -> AsyncIterator[Any]:
    process = await agora_peer.astart_receiver(answers={"2 + 2": "4"})
    yield process
    process.stop()


async def outbound_hub(hub: Any, tmp_path: Any, url: str, document: bool = True) -> Any:
    (tmp_path / "addition.md").write_text(ADDITION_DOC)
    doc = f'protocol_document = "{tmp_path / "addition.md"}"\n' if document else ""
    config = write_config(
        tmp_path / "out.toml",
        f'[[bridges.agora_http]]\nspace = "{SPACE}"\nagent_id = "{BRIDGE}"\nurl = "{url}"\n{doc}',
    )
    return await hub(config=config)


async def ask(client: WsClient, data: dict[str, Any]) -> dict[str, Any]:
    """Publish ``data`` to the bridge agent; return its answer."""
    mine = await client.request(
        {"type": "space.publish", "space": SPACE, "data": data, "to": BRIDGE}
    )

    def answers(m: dict[str, Any]) -> bool:
        return m.get("type") == "space.event" and m["data"].get("in_reply_to") == mine["event_id"]

    return await client._until(answers, 30)


# ── the library's sender → the hub ─────────────────────────────────────────


async def test_library_sender_single_round(agora_peer, inbound_hub, responder):
    url = f"{inbound_hub.http_url}/agora/{SPACE}"
    result = await agora_peer.arun_sender(url, ["2 + 2"], document=ADDITION_DOC)
    assert result.replies == [{"status": "success", "body": "echo:2 + 2"}]
    # It sent the base64 hash and a data: source; the space saw the hex hash.
    assert result.protocol_hash == format_hash(hash_document(ADDITION_DOC), HashForm.BASE64)
    [event] = responder.seen
    assert event["data"]["protocolHash"] == hash_document(ADDITION_DOC)
    assert event["data"]["protocolSources"] == [encode_source(ADDITION_DOC)]


async def test_library_sender_multiround_and_close(agora_peer, inbound_hub, responder):
    url = f"{inbound_hub.http_url}/agora/{SPACE}"
    result = await agora_peer.arun_sender(
        url, ["one", "two", "three"], document=ADDITION_DOC, multiround=True, close=True
    )
    assert result.errors == [None, None, None]
    assert [r["body"] for r in result.replies] == ["echo:one", "echo:two", "echo:three"]
    assert result.close == {"error": None}
    cid = result.conversation_id
    assert len(cid) == 32
    seen = await responder.wait_seen(4)
    assert [e["data"]["conversation_id"] for e in seen] == [cid] * 4
    assert seen[3]["data"]["end_conversation"] is True  # the DELETE was announced
    # Its follow-ups resend protocolHash (base64), multiround and the sources: accepted.
    assert [c["json"]["protocolHash"] for c in result.http[:3]] == [result.protocol_hash] * 3
    status, reply = await call("POST", f"{url}/conversations/{cid}", {"body": "four"})
    assert (status, reply) == (200, {"status": "failure", "error": "Conversation not found"})


async def test_library_sender_cannot_read_a_spec_failure(agora_peer, inbound_hub, responder):
    """The hub answers as the spec says; the library raises KeyError('body') on it."""
    url = f"{inbound_hub.http_url}/agora/{SPACE}"
    unknown = format_hash(hash_document("not declared"), HashForm.BASE64)
    result = await agora_peer.arun_sender(url, ["x"], protocol_hash=unknown, protocol_sources=[])
    assert result.errors[0]["type"] == "KeyError"
    assert result.http[0]["status"] == 200
    assert result.http[0]["text"] == '{"status":"failure","error":"Unsupported protocol"}'
    assert responder.seen == []


# ── the hub → the library's ReceiverServer ─────────────────────────────────


async def test_bridge_calls_the_library_receiver(hub, tmp_path, receiver):
    server = await outbound_hub(hub, tmp_path, receiver.url)
    alice = await WsClient.connect(server.url, "alice", heartbeat=True)
    await alice.join(SPACE)
    answer = await ask(alice, {"body": "2 + 2"})
    assert answer["data"]["status"] == "success" and answer["data"]["body"] == "4"
    conversation, message = receiver.wait_for_calls(2)
    # The library verified our data: source against the base64 hash with its own code.
    assert conversation["protocolHash"] == format_hash(hash_document(ADDITION_DOC), HashForm.BASE64)
    assert conversation["protocolSources"] == [encode_source(ADDITION_DOC)]
    assert message["body"] == "2 + 2"
    await alice.close()


async def test_bridge_multiround_with_the_library_receiver(hub, tmp_path, receiver):
    server = await outbound_hub(hub, tmp_path, receiver.url)
    alice = await WsClient.connect(server.url, "alice", heartbeat=True)
    await alice.join(SPACE)
    for n, text in enumerate(["one", "two", "three"]):
        data: dict[str, Any] = {"body": text, "conversation_id": "sums"}
        if n == 0:
            data["multiround"] = True
        if n == 2:
            data["end_conversation"] = True
        answer = await ask(alice, data)
        assert answer["data"]["body"] == f"echo:{text}", answer
        assert answer["data"]["conversation_id"] == "sums"
    after = await ask(alice, {"body": "four", "conversation_id": "sums"})
    assert after["data"]["error"] == "Conversation not found"
    calls = receiver.wait_for_calls(4)
    assert [c["event"] for c in calls] == ["conversation", "message", "message", "message"]
    assert [c["body"] for c in calls[1:]] == ["one", "two", "three"]
    assert "DELETE /conversations/" in await receiver_log(receiver, "DELETE /conversations/")
    await alice.close()


async def receiver_log(receiver: Any, line: str) -> str:
    """werkzeug's request log; a line may land just after the response did."""
    async with asyncio.timeout(10):
        while True:
            text = receiver.stderr_text()
            if line in text:
                return text
            await asyncio.sleep(0.05)  # a log file is all there is to watch


async def test_the_library_error_shape_is_a_failure(hub, tmp_path, agora_peer):
    rejected = format_hash(hash_document(ADDITION_DOC), HashForm.BASE64)
    with agora_peer.receiver(reject_hashes=[rejected]) as receiver:
        server = await outbound_hub(hub, tmp_path, receiver.url)
        alice = await WsClient.connect(server.url, "alice", heartbeat=True)
        await alice.join(SPACE)
        answer = await ask(alice, {"body": "2 + 2"})
        assert answer["data"]["status"] == "failure"
        assert answer["data"]["error"] == "Protocol rejected by stub"
        await alice.close()


# ── the hub → the hub ──────────────────────────────────────────────────────


async def test_one_hub_calls_another(hub, tmp_path, inbound_hub, responder):
    server = await outbound_hub(hub, tmp_path, f"{inbound_hub.http_url}/agora/{SPACE}")
    alice = await WsClient.connect(server.url, "alice", heartbeat=True)
    await alice.join(SPACE)
    opened = await ask(alice, {"body": "one", "multiround": True, "conversation_id": "c"})
    assert opened["data"]["body"] == "echo:one"
    ended = await ask(alice, {"body": "two", "conversation_id": "c", "end_conversation": True})
    assert ended["data"]["body"] == "echo:two"
    seen = await responder.wait_seen(3)
    # The remote hub got the document (base64 + source) and ended the conversation.
    assert seen[0]["data"]["protocolHash"] == hash_document(ADDITION_DOC)
    assert seen[2]["data"]["end_conversation"] is True
    await alice.close()
