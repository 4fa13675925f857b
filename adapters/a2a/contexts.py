"""What an outbound A2A bridge remembers, in the cluster's key-value store.

* One remote ``contextId`` per (space, sender, ``data.context_id``): the
  sender names its conversations as it likes, the remote gets its own ids.
  A sender that names none gets the remote's id back as ``context_id`` and
  may name it next time.
* The remote tasks waiting for a sender's input (``INPUT_REQUIRED``): whose
  they are and in which context, so only that sender continues one, and a
  standby node that takes the bridge over continues them too.

Entries expire after ``ttl`` seconds without use.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from hub.adapter_host import KeyValueStore

PREFIX = "a2a:out:"


@dataclass(frozen=True, slots=True)
class WaitingTask:
    """A remote task asking one sender for more."""

    task_id: str
    space: str
    sender: str
    context_id: str | None
    #: The sender's own name for the context (``data.context_id``), if any.
    context_name: str | None


class BridgeMemory:
    def __init__(self, kv: KeyValueStore, agent_id: str, ttl: float):
        self.kv = kv
        self.agent_id = agent_id
        self.ttl = ttl

    def _key(self, kind: str, *parts: str) -> str:
        # Ids may contain ':' and names anything: hash the tuple.
        digest = hashlib.sha256(orjson.dumps([self.agent_id, *parts])).hexdigest()
        return f"{PREFIX}{kind}:{digest}"

    async def context(self, space: str, sender: str, name: str) -> str | None:
        raw = await self.kv.get(self._key("ctx", space, sender, name))
        return raw.decode() if raw is not None else None

    async def remember_context(self, space: str, sender: str, name: str, remote: str) -> None:
        await self.kv.set(self._key("ctx", space, sender, name), remote.encode(), self.ttl)

    async def waiting(self, task_id: str) -> WaitingTask | None:
        raw = await self.kv.get(self._key("task", task_id))
        value: Any = None
        if raw is not None:
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                value = None
        if not isinstance(value, dict):
            return None
        try:
            return WaitingTask(
                task_id, value["space"], value["sender"], value["context"], value["name"]
            )
        except KeyError:
            return None

    async def remember_waiting(self, task: WaitingTask) -> None:
        value = {
            "space": task.space,
            "sender": task.sender,
            "context": task.context_id,
            "name": task.context_name,
        }
        await self.kv.set(self._key("task", task.task_id), orjson.dumps(value), self.ttl)

    async def forget_waiting(self, task_id: str) -> None:
        await self.kv.delete(self._key("task", task_id))
