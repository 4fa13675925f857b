"""An agent on the hub that answers HTTP Agora requests made with curl.

Run a hub with ``examples/agora_http.toml``, then this agent, then::

    curl -s http://127.0.0.1:8766/agora/weather -d '{"body": "Weather in Paris?"}'
    {"status":"success","body":"Tomorrow in Paris: sunny."}

    curl -s http://127.0.0.1:8766/agora/weather \\
         -d '{"body": {"city": "Oslo"}, "protocolHash": "<hash of the weather document>"}'
    {"status":"success","body":{"city":"Oslo","forecast":"rainy"}}

Every HTTP request arrives as a ``space.event`` from ``agora-http``; the first event
in the space whose ``data.in_reply_to`` names it is the HTTP answer, which
``hub.serve()`` sends for what the handler returns (addressed to ``agora-http``).
Ctrl-C stops the agent; an agent id already connected is one line saying so
(``agora_client.run``).
"""

from __future__ import annotations

import argparse
import hashlib
import re
from typing import Any

from agora_client import Client, Event, run

FORECASTS = ("sunny", "windy", "cloudy", "rainy")


def forecast(city: str) -> str:
    # Deterministic, so the example's test knows the answer.
    return FORECASTS[hashlib.sha1(city.lower().encode()).digest()[0] % len(FORECASTS)]


def answer(data: dict[str, Any]) -> dict[str, Any] | None:
    """The reply's data for a request's data (``None``: nothing to answer)."""
    if data.get("end_conversation"):
        return None  # a conversation was closed with DELETE: nothing to say
    body = data.get("body")
    if isinstance(body, dict):  # the weather protocol: JSON in, JSON out
        city = body.get("city")
        if not isinstance(city, str):
            return {"body": {"error": "Invalid format"}}  # a protocol-level error
        return {"body": {"city": city, "forecast": forecast(city)}}
    if isinstance(body, str):  # natural language
        found = re.search(r"\bin ([A-Z][\w-]*)", body)
        if found is None:
            return {"status": "failure", "error": "Which city?"}  # an Agora-level failure
        city = found.group(1)
        return {"body": f"Tomorrow in {city}: {forecast(city)}."}
    return None


def handle(event: Event) -> dict[str, Any] | None:
    """What ``serve`` calls for each request in the space: only the bridge's count."""
    return answer(event.data) if event.sender == "agora-http" else None


async def main(url: str, space: str, agent_id: str) -> None:
    async with Client(url, agent_id, reconnect=True) as hub:
        await hub.join(space)
        print(f"{agent_id} answering HTTP Agora requests in {space!r}", flush=True)
        await hub.serve(space, handle)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8765/ws")
    parser.add_argument("--space", default="weather")
    parser.add_argument("--agent-id", default="forecaster")
    args = parser.parse_args()
    run(main(args.url, args.space, args.agent_id))
