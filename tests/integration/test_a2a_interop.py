"""The real a2a-sdk 1.3.0, both ways: its client against the hub's gateway, and
the hub's bridge against its server (each in the library's own venv)."""

from __future__ import annotations

from typing import Any

from adapters.a2a import A2aGateway, A2aOutbound, OutboundOptions, SpaceCard
from tests.support.a2a_agents import Answerer
from tests.support.wsclient import WsClient

SPACE = "lab"


def gateway() -> A2aGateway:
    return A2aGateway({SPACE: SpaceCard("Lab agents", "The lab, over A2A")})


def final_state(result: dict[str, Any]) -> str:
    events = result["events"]
    last = events[-1]
    if "task" in last:
        return str(last["task"]["status"]["state"])
    return str(last["statusUpdate"]["status"]["state"])


def artifact_text(result: dict[str, Any]) -> str:
    texts = []
    for event in result["events"]:
        update = event.get("artifactUpdate") or {}
        texts += [p.get("text", "") for p in update.get("artifact", {}).get("parts", [])]
        for artifact in event.get("task", {}).get("artifacts", []):
            texts += [p.get("text", "") for p in artifact.get("parts", [])]
    return "".join(texts)


async def test_the_sdk_client_talks_to_agents_on_the_hub(hub, clients, a2a_peer):
    server = await hub(adapters=[gateway()], bridge_timeout=5)
    helper = await Answerer.start(clients, server)
    base = f"{server.http_url}/a2a/{SPACE}"
    results = await a2a_peer.client(
        base,
        [
            {"op": "card"},
            {"op": "send", "text": "hello"},
            {"op": "send", "text": "stream please", "streaming": True},
            {"op": "send", "text": "ask me", "streaming": True},
            {"op": "send", "text": "Paris", "task_id": {"from": 3}},
            {"op": "get", "task_id": {"from": 3}},
            {"op": "send", "text": "fail now"},
            {"op": "send", "text": "hello", "url": f"{base}/helper"},
            {"op": "card", "url": f"{base}/helper"},
        ],
    )
    assert all("error" not in r for r in results), results
    card, blocking, streamed, asked, answered, got, failed, direct, member = results
    assert card["card"]["name"] == "Lab agents"
    assert card["card"]["supportedInterfaces"][0]["url"] == base
    assert [s["id"] for s in card["card"]["skills"]] == ["urn:test:echo"]
    assert card["card"]["capabilities"]["streaming"] is True
    # Blocking: one task, completed, the answer as its artifact.
    assert final_state(blocking) == "TASK_STATE_COMPLETED"
    assert artifact_text(blocking) == "echo:hello"
    # Streaming: task, WORKING, one artifactUpdate per delta, the final status.
    kinds = [next(iter(e)) for e in streamed["events"]]
    assert kinds[0] == "task" and kinds[-1] == "statusUpdate"
    assert streamed["events"][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    assert kinds.count("artifactUpdate") >= 2
    assert artifact_text(streamed) == "one two three"
    assert final_state(streamed) == "TASK_STATE_COMPLETED"
    # Multi-turn: INPUT_REQUIRED, then the follow-up naming the task completes it.
    assert final_state(asked) == "TASK_STATE_INPUT_REQUIRED"
    question = asked["events"][-1]["statusUpdate"]["status"]["message"]["parts"][0]["text"]
    assert question == "which city?"
    assert answered["ids"][0] == asked["ids"][0]
    assert final_state(answered) == "TASK_STATE_COMPLETED"
    assert artifact_text(answered) == "thanks for Paris"
    assert got["events"][0]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert failed["events"][-1]["task"]["status"]["message"]["parts"][0]["text"] == "it broke"
    assert final_state(failed) == "TASK_STATE_FAILED"
    assert artifact_text(direct) == "echo:hello"
    assert member["card"]["name"] == "helper"
    # What the agent saw: one event per message, the follow-up with the same task id.
    follow = await helper.wait_for(lambda d: d.get("text") == "Paris")
    assert follow["task_id"] == asked["ids"][0] and follow["via"] == "a2a"
    await helper.aclose()


async def test_the_sdk_client_cancels_a_streaming_task(hub, clients, a2a_peer):
    server = await hub(adapters=[gateway()], bridge_timeout=20)
    helper = await Answerer.start(clients, server)
    base = f"{server.http_url}/a2a/{SPACE}"
    results = await a2a_peer.client(
        base,
        [
            {"op": "send", "text": "slow one", "streaming": True, "cancel_after_first": True},
            {"op": "cancel", "task_id": {"from": 0}},
            {"op": "get", "task_id": {"from": 0}},
        ],
    )
    streamed, again, got = results
    assert "error" not in streamed, streamed
    cancelled = next(e["cancelled"] for e in streamed["events"] if "cancelled" in e)
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    assert final_state(streamed) == "TASK_STATE_CANCELED"
    assert again["error"]["type"] == "TaskNotCancelableError"
    assert got["events"][0]["task"]["status"]["state"] == "TASK_STATE_CANCELED"
    told = await helper.wait_for(lambda d: d.get("cancel") is True)
    # Contract §19: the cancel names the request it cancels (in_reply_to).
    assert told == {
        "via": "a2a", "task_id": streamed["ids"][0], "cancel": True, "from": "a2a",
        "in_reply_to": told["in_reply_to"],
    }  # fmt: skip
    assert isinstance(told["in_reply_to"], str) and told["in_reply_to"]
    await helper.aclose()


async def test_the_bridge_calls_the_sdk_server(hub, a2a_peer):
    remote = await a2a_peer.server()
    try:
        bridge = A2aOutbound(SPACE, "sdk", remote.url, options=OutboundOptions(flush_interval=0.01))
        server = await hub(adapters=[bridge], bridge_timeout=10)
        await bridge.card_read.wait()
        alice = await WsClient.connect(server.url, "alice", heartbeat=True)
        await alice.join(SPACE)
        listed = await alice.request({"type": "agent.list", "capability": "summarize"})
        assert [a["id"] for a in listed["agents"]] == ["sdk"]
        assert listed["agents"][0]["metadata"]["a2a"]["name"] == "sdk-echo"

        async def ask(data: dict[str, Any]) -> dict[str, Any]:
            sent = await alice.request(
                {"type": "space.publish", "space": SPACE, "to": "sdk", "data": data}
            )
            return await alice._until(
                lambda m: (
                    m.get("from") == "sdk"
                    and (m.get("data") or {}).get("in_reply_to") == sent["event_id"]
                ),
                15,
            )

        plain = await ask({"text": "hello"})
        assert plain["data"]["status"] == "success" and plain["data"]["text"] == "echo:hello"
        assert plain["to"] == ["alice"] or plain["to"] == "alice"
        streamed = await ask({"text": "stream:x"})
        assert streamed["type"] == "space.event.delta"
        assert streamed["data"]["task_id"]
        text = streamed["data"]["text"]
        while True:
            frame = await alice._until(lambda m: m.get("event_id") == streamed["event_id"], 15)
            if frame["type"] == "space.event.done":
                break
            text += frame["data"]["text"]
        assert text == "chunk0 chunk1 chunk2 "
        question = await ask({"text": "ask:x", "context_id": "trip"})
        assert question["data"]["state"] == "input-required"
        assert question["data"]["text"] == "which city?"
        thanks = await ask({"text": "Oslo", "task_id": question["data"]["task_id"]})
        assert thanks["data"]["text"] == "thanks for Oslo"
        failed = await ask({"text": "fail:x"})
        assert failed["data"] == {
            "in_reply_to": failed["data"]["in_reply_to"], "status": "failure",
            "error": "it broke", "task_id": failed["data"]["task_id"],
            "context_id": failed["data"]["context_id"], "from": "sdk",
        }  # fmt: skip
        executed = await remote.wait_for("execute", 5)
        assert executed[3]["resumed"] and executed[3]["task_id"] == question["data"]["task_id"]
        # The same named context maps to the same remote context.
        again = await ask({"text": "hello again", "context_id": "trip"})
        assert again["data"]["context_id"] == "trip"
        executed = await remote.wait_for("execute", 6)
        assert executed[5]["context_id"] == executed[2]["context_id"]
        await alice.close()
    finally:
        remote.stop()
