"""An agent on the hub that answers what the A2A gateway publishes, for tests.

:class:`Answerer` is a real WebSocket agent (the project's SDK client): it
joins a space, registers capabilities, and answers each request event from
the ``a2a`` virtual agent by the first word of its text:

* ``stream`` — a client stream of three deltas (``one two three``);
* ``ask`` — ``state: "input-required"`` (the question ``which city?``); the
  task's next message is answered ``thanks for <text>``;
* ``fail`` — ``status: "failure"``, ``error: "it broke"``;
* ``data`` — a JSON ``data`` reply;
* ``work`` — a progress note (``state: "working"``, ``on it``): the task stays
  ``WORKING`` until the test calls :meth:`Answerer.finish` (a follow-up
  ``work`` message gets another note);
* ``silent`` / ``slow`` — nothing (a ``slow`` one streams ``working…`` first and
  then stalls until the task is cancelled);
* anything else — ``echo:<text>``.

Everything it received is kept in :attr:`Answerer.seen` once answered, cancels included.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

from agora_client import Client

_streams = itertools.count(1)


class Answerer:
    def __init__(self, client: Client, space: str):
        self.client = client
        self.space = space
        self.seen: list[dict[str, Any]] = []
        self.changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._slow: dict[str, Any] = {}
        #: Requests answered with a progress note: task id → their event id.
        self.working: dict[str, str] = {}

    @classmethod
    async def start(
        cls, clients: Any, server: Any, agent_id: str = "helper", space: str = "lab",
        capabilities: tuple[str, ...] = ("urn:test:echo",),
    ) -> Answerer:  # fmt: skip
        client = await clients(server, agent_id)
        await client.register(capabilities=list(capabilities), metadata={"description": "helps"})
        await client.join(space)
        answerer = cls(client, space)
        answerer._task = asyncio.get_running_loop().create_task(answerer._loop())
        return answerer

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def wait_for(self, predicate: Any, timeout: float = 10) -> dict[str, Any]:
        async with asyncio.timeout(timeout), self.changed:
            while True:
                for data in self.seen:
                    if predicate(data):
                        return data
                await self.changed.wait()

    async def _loop(self) -> None:
        async for event in self.client.events(self.space):
            if event.sender != "a2a":
                continue
            await self._answer(event.event_id, event.data)
            async with self.changed:  # seen once answered (a slow one's stream open)
                self.seen.append(event.data)
                self.changed.notify_all()

    async def _answer(self, event_id: str, data: dict[str, Any]) -> None:
        if data.get("cancel"):
            stream = self._slow.pop(data.get("task_id"), None)
            if stream is not None:
                await stream.cancel("task cancelled")
            return
        text = str(data.get("text", ""))
        word = text.split(" ", 1)[0]
        reply: dict[str, Any] = {"in_reply_to": event_id}
        if word == "work":
            self.working[str(data.get("task_id"))] = event_id
            reply.update(state="working", text="on it")
        elif any(d.get("task_id") == data.get("task_id") for d in self.seen):
            reply["text"] = f"thanks for {text}"
        elif word == "stream":
            async with self.client.stream(self.space, data={"in_reply_to": event_id}) as s:
                for chunk in ("one ", "two ", "three"):
                    await s.send(chunk)
            return
        elif word == "ask":
            reply.update(state="input-required", text="which city?")
        elif word == "fail":
            reply.update(status="failure", error="it broke")
        elif word == "data":
            reply["data"] = {"answer": 42, "caller": data.get("caller")}
        elif word == "slow":
            stream = self.client.stream(
                self.space, event_id=f"slow{next(_streams)}", data={"in_reply_to": event_id}
            )
            await stream.send("working… ")
            self._slow[data.get("task_id")] = stream
            return
        elif word == "silent":
            return
        else:
            reply["text"] = f"echo:{text}"
        await self.client.publish(self.space, reply)

    async def finish(self, task_id: str, chunks: tuple[str, ...] = ("done",)) -> None:
        """Answer a ``work`` request at last: one reply, or a stream of ``chunks``."""
        event_id = self.working.pop(task_id)
        if len(chunks) == 1:
            await self.client.publish(self.space, {"in_reply_to": event_id, "text": chunks[0]})
            return
        async with self.client.stream(self.space, data={"in_reply_to": event_id}) as s:
            for chunk in chunks:
                await s.send(chunk)
