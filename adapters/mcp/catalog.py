"""The tools agents offer, read from the members of the ``mcp = true`` spaces.

A member of such a space whose registration carries ``metadata.mcp_tools``
offers them while it is a member, wherever in the cluster it is connected:
the catalog reads the spaces' members with their registered metadata
(``SpaceReads.member_records``, cluster-wide) and keeps the result for at
most ``ttl`` seconds (at most ``max_tools`` of them, by name, within
``max_bytes`` of listing). A membership change in one of the spaces (the ``mcp``
agent is a member of each and hears of every join and leave) makes the next
read fresh at once; a name that is not found is looked up once more, fresh,
before the call is refused.

Every read that changes the set of tools bumps :attr:`ToolCatalog.version`
and calls ``on_change`` (the notification streams tell their clients
``notifications/tools/list_changed``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence

import orjson

from hub.adapter_host import AgentRecord
from protocol.mcp.tools import AgentTool, offered_tools

_SORTED = orjson.OPT_SORT_KEYS
ReadMembers = Callable[[str, int], Awaitable[list[AgentRecord]]]


class ToolCatalog:
    def __init__(
        self,
        spaces: Sequence[str],
        read_members: ReadMembers,
        *,
        ttl: float,
        scan_limit: int,
        max_tools: int,
        max_bytes: int = 4 * 1024 * 1024,
        exclude: tuple[str, ...] = (),
        on_change: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.spaces = tuple(sorted(spaces))
        self.ttl = ttl
        self.scan_limit = scan_limit
        self.max_tools = max_tools
        self.max_bytes = max_bytes
        self.version = 0
        self._read_members = read_members
        self._exclude = exclude
        self._on_change = on_change
        self._clock = clock
        self._tools: dict[str, AgentTool] = {}
        self._read_at: float | None = None
        self._reading: asyncio.Task[dict[str, AgentTool]] | None = None

    def invalidate(self) -> None:
        """The next read goes to the members (a membership changed)."""
        self._read_at = None

    @property
    def stale(self) -> bool:
        return self._read_at is None or self._clock() - self._read_at >= self.ttl

    async def tools(self) -> dict[str, AgentTool]:
        """Every agent tool by its full name, at most ``ttl`` seconds old.
        Raises :class:`~hub.adapter_host.BackplaneUnavailable`."""
        if not self.spaces:
            return {}
        if self.stale:
            return await self.refresh()
        return self._tools

    async def find(self, name: str) -> AgentTool | None:
        tool = (await self.tools()).get(name)
        if tool is None and self.spaces and self._age() >= self.ttl / 10:
            # Registered a moment ago? One fresh look before saying no (not more
            # often than a tenth of the TTL: unknown names must not cost a read each).
            self.invalidate()
            tool = (await self.tools()).get(name)
        return tool

    def _age(self) -> float:
        return math.inf if self._read_at is None else self._clock() - self._read_at

    async def refresh(self) -> dict[str, AgentTool]:
        """Read the members now; concurrent callers share one read, which runs
        on by itself when a caller gives up waiting."""
        if self._reading is None:
            self._reading = asyncio.get_running_loop().create_task(self._refresh())
            # Retrieved here too: every caller may have stopped waiting for it.
            self._reading.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await asyncio.shield(self._reading)

    async def _refresh(self) -> dict[str, AgentTool]:
        try:
            started = self._clock()
            found = await self._read()
            changed = _listing(found) != _listing(self._tools)
            self._tools = found
            self._read_at = started
            if changed:
                self.version += 1
                if self._on_change is not None:
                    self._on_change()
            return found
        finally:
            self._reading = None

    async def _read(self) -> dict[str, AgentTool]:
        found: dict[str, AgentTool] = {}
        for space in self.spaces:
            for record in await self._read_members(space, self.scan_limit):
                if record.agent_id in self._exclude:
                    continue
                for tool in offered_tools(record.agent_id, space, record.metadata):
                    found.setdefault(tool.full_name, tool)  # first space (by name) wins
        kept: dict[str, AgentTool] = {}
        size = 0
        for name in sorted(found)[: self.max_tools]:
            size += len(orjson.dumps(found[name].listing()))
            if size > self.max_bytes:
                break
            kept[name] = found[name]
        return kept


def _listing(tools: dict[str, AgentTool]) -> list[tuple[str, str, str, bytes]]:
    """What a client sees of the tools (and where calls go)."""
    return [
        (name, tool.space, tool.description, orjson.dumps(tool.input_schema, option=_SORTED))
        for name, tool in tools.items()
    ]
