"""What an outbound A2A bridge remembers, in the cluster's key-value store.

* One remote ``contextId`` per (space, sender, ``data.context_id``): the
  sender names its conversations as it likes, the remote gets its own ids.
  A sender that names none gets the remote's id back as ``context_id`` and
  may name it next time.
* The remote tasks waiting for a sender's input (``INPUT_REQUIRED``): whose
  they are and in which context, so only that sender continues one, and a
  standby node that takes the bridge over continues them too. A waiting
  task is found by its remote id and, when the request that made it named a
  task of its own (the hub's A2A gateway names its task), by that id too: an
  alias, kept per (space, sender) as context names are, so one sender's name
  never hides or replaces another's. Only a task's sender forgets it.

Entries expire after ``ttl`` seconds without use. :meth:`BridgeMemory.resolve`
and :meth:`BridgeMemory.settle` are what a call needs before and after.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import orjson

from adapters.kit.stored import hashed_key, json_object
from hub.adapter_host import BackplaneUnavailable, KeyValueStore

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
    #: The sender's own name for the task (its alias), if it gave one.
    alias: str | None = None


class BridgeMemory:
    def __init__(self, kv: KeyValueStore, agent_id: str, ttl: float):
        self.kv = kv
        self.agent_id = agent_id
        self.ttl = ttl

    def _key(self, kind: str, *parts: str) -> str:
        return hashed_key(f"{PREFIX}{kind}:", self.agent_id, *parts)

    async def context(self, space: str, sender: str, name: str) -> str | None:
        raw = await self.kv.get(self._key("ctx", space, sender, name))
        return raw.decode() if raw is not None else None

    async def remember_context(self, space: str, sender: str, name: str, remote: str) -> None:
        await self.kv.set(self._key("ctx", space, sender, name), remote.encode(), self.ttl)

    async def waiting(
        self, task_id: str, space: str | None = None, sender: str | None = None
    ) -> WaitingTask | None:
        """The task waiting for input that ``task_id`` names: the alias
        ``sender`` remembered it under in ``space`` (an alias is one sender's
        own name), else its remote id (whoever's it is)."""
        keys = [self._key("task", task_id)]
        if space is not None and sender is not None:
            keys.insert(0, self._key("alias", space, sender, task_id))
        for key in keys:
            value = json_object(await self.kv.get(key))
            if value is None:
                continue
            remote, alias = value.get("task", task_id), value.get("alias")
            try:
                return WaitingTask(
                    remote if isinstance(remote, str) else task_id,
                    value["space"], value["sender"], value["context"], value["name"],
                    alias if isinstance(alias, str) else None,
                )  # fmt: skip
            except KeyError:
                continue
        return None

    async def remember_waiting(self, task: WaitingTask, alias: str | None = None) -> None:
        value = orjson.dumps({
            "space": task.space,
            "sender": task.sender,
            "context": task.context_id,
            "name": task.context_name,
            "task": task.task_id,
            "alias": alias,
        })  # fmt: skip
        await self.kv.set(self._key("task", task.task_id), value, self.ttl)
        if alias is not None:
            await self.kv.set(self._key("alias", task.space, task.sender, alias), value, self.ttl)

    async def forget_waiting(self, space: str, sender: str, task_id: str) -> WaitingTask | None:
        """Forget the task waiting for ``sender``'s input that ``task_id`` (its
        remote id or the sender's alias) names — only if it is the sender's:
        another sender's waiting task is left alone. The task, if forgotten."""
        waiting = await self.waiting(task_id, space, sender)
        await self.kv.delete(self._key("alias", space, sender, task_id))
        if waiting is None or (waiting.space, waiting.sender) != (space, sender):
            return None
        await self.kv.delete(self._key("task", waiting.task_id))
        if waiting.alias is not None:
            await self.kv.delete(self._key("alias", space, sender, waiting.alias))
        return waiting

    async def resolve(
        self, space: str, sender: str, task_id: str | None, name: str | None
    ) -> tuple[str | None, str | None] | None:
        """``(remote context, context name)`` for a sender's next message: the
        waiting task's when it continues one (None when that task is not the
        sender's), else its named context's (if any yet)."""
        if task_id is not None:
            waiting = await self.waiting(task_id, space, sender)
            if waiting is None or (waiting.space, waiting.sender) != (space, sender):
                return None
            return waiting.context_id, waiting.context_name
        if name is not None:
            return await self.context(space, sender, name), name
        return None, None

    async def settle(
        self,
        space: str,
        sender: str,
        name: str | None,
        *,
        kind: str,
        context_id: str | None,
        task_id: str | None,
        continued: str | None,
        alias: str | None = None,
    ) -> None:
        """After a call: remember its context (under the sender's name for it,
        or the remote's id), the task if it now waits for input (by its id and
        by ``alias``, the sender's own id for it), and forget the task it
        continued — the sender's own only (:meth:`forget_waiting`)."""
        if kind != "failure" and context_id is not None:
            with contextlib.suppress(BackplaneUnavailable):
                await self.remember_context(space, sender, name or context_id, context_id)
        if kind == "input-required" and task_id is not None:
            task = WaitingTask(task_id, space, sender, context_id, name)
            await self.remember_waiting(task, alias)
            return
        with contextlib.suppress(BackplaneUnavailable):
            for key in (continued, alias):
                if key is not None:
                    await self.forget_waiting(space, sender, key)
