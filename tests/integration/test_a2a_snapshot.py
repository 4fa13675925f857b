"""The task as it is while its reply streams, on the node serving the turn:
``GetTask``, ``ListTasks`` (with ``includeArtifacts``) and ``SubscribeToTask``'s
first event hold the text streamed so far, under the artifact id the later
``append`` updates extend (found by an outside audit: they showed no artifact,
so a late subscriber could rebuild only the deltas after it came)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from adapters.a2a import A2aGateway, InboundOptions, SpaceCard
from tests.support import a2a_http as a2a
from tests.support.a2a_agents import Answerer

SPACE = "lab"
WORKING, COMPLETED = "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"


async def subscription(http: aiohttp.ClientSession, url: str, task_id: str) -> AsyncIterator[Any]:
    """``SubscribeToTask``'s results, one by one as they arrive."""
    body = {"jsonrpc": "2.0", "id": "sub", "method": "SubscribeToTask", "params": {"id": task_id}}
    async with http.post(url, json=body, headers=a2a.HEADERS) as resp:
        assert resp.status == 200 and resp.content_type == "text/event-stream"
        async for line in resp.content:
            if line.startswith(b"data: "):
                yield json.loads(line[6:])["result"]


def text_of(artifact: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in artifact["parts"])


async def test_the_task_mid_stream_holds_the_reply_streamed_so_far(hub, clients):
    server = await hub(adapters=[A2aGateway({SPACE: SpaceCard()}, InboundOptions())])
    helper = await Answerer.start(clients, server)
    url = f"{server.http_url}/a2a/{SPACE}"
    task = await a2a.send(url, "work on it")  # answered at the agent's progress note
    assert a2a.state(task) == WORKING
    asked = helper.working.pop(task["id"])
    stream = helper.client.stream(SPACE, data={"in_reply_to": asked}, coalesce=0)
    async with aiohttp.ClientSession() as http:
        # An early subscriber sees the first deltas reach the gateway.
        early = subscription(http, url, task["id"])
        first = await anext(early)
        assert "artifacts" not in first["task"]
        await stream.send("one ")
        await stream.send("two ")
        seen, artifact_id = "", None
        async with asyncio.timeout(10):
            while seen != "one two ":
                update = (await anext(early))["artifactUpdate"]
                artifact_id = artifact_id or update["artifact"]["artifactId"]
                seen += text_of(update["artifact"])
        # GetTask now: the reply as streamed so far, one artifact.
        got = (await a2a.call(url, "GetTask", {"id": task["id"]}))["result"]
        assert a2a.state(got) == WORKING
        assert [(a["artifactId"], text_of(a)) for a in got.get("artifacts", [])] == [
            (artifact_id, "one two ")
        ], got
        # ListTasks shows it the same way when asked for artifacts, and none otherwise.
        listed = (await a2a.call(url, "ListTasks", {"includeArtifacts": True}))["result"]
        (mine,) = [t for t in listed["tasks"] if t["id"] == task["id"]]
        assert [(a["artifactId"], text_of(a)) for a in mine.get("artifacts", [])] == [
            (artifact_id, "one two ")
        ], mine
        bare = (await a2a.call(url, "ListTasks", {}))["result"]
        assert all("artifacts" not in t for t in bare["tasks"]), bare
        # A late subscriber: first the task as it is, then appends onto that artifact.
        late = subscription(http, url, task["id"])
        snapshot = (await anext(late))["task"]
        assert a2a.state(snapshot) == WORKING
        assert [(a["artifactId"], text_of(a)) for a in snapshot.get("artifacts", [])] == [
            (artifact_id, "one two ")
        ], snapshot
        await stream.send("three")
        await stream.close()
        rebuilt = {a["artifactId"]: text_of(a) for a in snapshot["artifacts"]}
        events = []
        async with asyncio.timeout(10):
            async for result in late:
                events.append(result)
                if "artifactUpdate" in result:
                    update = result["artifactUpdate"]
                    assert update.get("append") is True, update  # it extends what it had
                    part = update["artifact"]
                    rebuilt[part["artifactId"]] = rebuilt[part["artifactId"]] + text_of(part)
        assert a2a.state(events[-1]["statusUpdate"]) == COMPLETED
        assert rebuilt == {artifact_id: "one two three"}
        await early.aclose()
    done = (await a2a.call(url, "GetTask", {"id": task["id"]}))["result"]
    assert a2a.state(done) == COMPLETED
    assert [(a["artifactId"], text_of(a)) for a in done["artifacts"]] == [
        (artifact_id, "one two three")
    ]
    await helper.aclose()
