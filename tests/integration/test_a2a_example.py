"""The runnable example of docs/a2a.md: a hub process with examples/a2a.toml, the
example agent, and the real a2a-sdk client asking it for the weather."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

from tests.support.examples import EXAMPLES, load_example
from tests.support.servers import ROOT

example = load_example("a2a_agent")


def texts(result: dict[str, Any]) -> str:
    return "".join(
        p.get("text", "")
        for e in result["events"]
        for p in (e.get("artifactUpdate") or {}).get("artifact", {}).get("parts", [])
    )


async def test_the_example_agent_answers_the_sdk_client(hub_process, a2a_peer):
    hub = await asyncio.to_thread(hub_process, config=str(EXAMPLES / "a2a.toml"))
    agent = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLES / "a2a_agent.py"), "--url", hub.url,
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert agent.stdout is not None
        line = await asyncio.wait_for(agent.stdout.readline(), 20)  # once it has joined
        assert b"answering A2A requests" in line, line
        base = f"{hub.http_url}/a2a/weather"
        card, paris, asked, oslo = await a2a_peer.client(
            base,
            [
                {"op": "card"},
                {"op": "send", "text": "Weather in Paris?", "streaming": True},
                {"op": "send", "text": "Weather?", "streaming": True},
                {"op": "send", "text": "Oslo", "task_id": {"from": 2}, "streaming": True},
            ],
        )
        assert card["card"]["name"] == "Weather desk"
        assert [s["id"] for s in card["card"]["skills"]] == ["urn:example:weather"]
        assert texts(paris) == f"Tomorrow in Paris: {example.forecast('Paris')}."
        assert sum("artifactUpdate" in e for e in paris["events"]) >= 2  # streamed
        question = asked["events"][-1]["statusUpdate"]["status"]
        assert question["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert question["message"]["parts"][0]["text"] == "Which city?"
        assert texts(oslo) == f"Tomorrow in Oslo: {example.forecast('Oslo')}."
        assert oslo["ids"][0] == asked["ids"][0]
    finally:
        agent.terminate()
        await asyncio.wait_for(agent.wait(), 10)
