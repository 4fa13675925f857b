"""An agent on the hub that A2A clients talk to (through the hub's A2A gateway).

Run a hub with ``examples/a2a.toml``, then this agent, then any A2A 1.0 client —
here the reference one, PyPI ``a2a-sdk`` (``pip install a2a-sdk``)::

    import asyncio, uuid
    from a2a.client import ClientConfig, create_client
    from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest

    async def main():
        client = await create_client("http://127.0.0.1:8766/a2a/weather",
                                     client_config=ClientConfig(streaming=True))
        message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()),
                          parts=[Part(text="Weather in Paris?")])
        async for event in client.send_message(SendMessageRequest(message=message)):
            print(event)          # the task, WORKING, one artifactUpdate per word, COMPLETED

    asyncio.run(main())

Every A2A message arrives as a ``space.event`` from ``a2a`` with ``data.text``,
``data.task_id`` and ``data.caller``; the first event (or stream) whose
``data.in_reply_to`` names it answers. This agent streams its forecast word by
word (each word an ``artifactUpdate``), asks for the city when the message names
none (``state: "input-required"``, the task's next message is the city), and
forgets a question whose task was cancelled (``data.cancel``). ``hub.serve()`` runs
the loop: it hands each request to the handler and sends back what it returns.
"""

from __future__ import annotations

import argparse
import hashlib
import re
from collections.abc import Iterator

from agora_client import Client, Event, run

FORECASTS = ("sunny", "windy", "cloudy", "rainy")


def forecast(city: str) -> str:
    # Deterministic, so the example's test knows the answer.
    return FORECASTS[hashlib.sha1(city.lower().encode()).digest()[0] % len(FORECASTS)]


def city_in(text: str) -> str | None:
    found = re.search(r"\bin ([A-Z][\w-]*)", text)
    return found.group(1) if found else None


class Forecaster:
    """The handler ``serve`` calls for each request; it remembers the tasks waiting
    for the client to name a city."""

    def __init__(self) -> None:
        self.asking: set[str] = set()

    def __call__(self, event: Event) -> Iterator[str] | dict[str, str] | None:
        data = event.data
        if event.sender != "a2a":
            return None
        task_id = str(data.get("task_id"))
        if data.get("cancel"):
            self.asking.discard(task_id)
            return None
        text = str(data.get("text", "")).strip()
        city = city_in(text) or (text if task_id in self.asking and text else None)
        if city is None:
            self.asking.add(task_id)
            return {"state": "input-required", "text": "Which city?"}
        self.asking.discard(task_id)
        words = f"Tomorrow in {city}: {forecast(city)}.".split(" ")
        return (word if n == 0 else " " + word for n, word in enumerate(words))  # streamed


async def main(url: str, space: str, agent_id: str) -> None:
    async with Client(url, agent_id, reconnect=True) as hub:
        await hub.register(
            capabilities=["urn:example:weather"],
            metadata={"a2a": {"name": "Forecaster", "description": "Tomorrow's weather"}},
        )
        await hub.join(space)
        print(f"{agent_id} answering A2A requests in {space!r}", flush=True)
        await hub.serve(space, Forecaster())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8765/ws")
    parser.add_argument("--space", default="weather")
    parser.add_argument("--agent-id", default="forecaster")
    args = parser.parse_args()
    run(main(args.url, args.space, args.agent_id))
