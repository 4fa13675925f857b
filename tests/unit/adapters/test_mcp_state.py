"""The MCP adapter's state, without a hub: sessions, the tool catalog, mcp.calls,
the calls running."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from adapters.mcp.calllog import CallLog, call_digest
from adapters.mcp.catalog import ToolCatalog
from adapters.mcp.progress import RunningCall, RunningCalls
from adapters.mcp.sessions import Sessions
from hub.adapter_host import AgentRecord, BackplaneUnavailable
from hub.cluster.kvstore import MemoryKeyValueStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _sessions(ttl: float = 100.0, max_open: int = 10) -> tuple[Sessions, Clock]:
    clock = Clock()
    return Sessions(MemoryKeyValueStore(clock=clock), ttl, max_open, clock=clock), clock


async def test_a_session_slides_while_used_and_expires_when_not():
    sessions, clock = _sessions()
    session = await sessions.open("alice", "2025-11-25")
    assert session is not None and len(session.id) >= 32
    clock.now += 40  # not yet halfway: found as it is
    assert await sessions.find(session.id) == session
    clock.now += 20  # past halfway: extended
    found = await sessions.find(session.id)
    assert found is not None and found.expires == clock.now + 100
    clock.now += 99
    assert await sessions.find(session.id) is not None
    clock.now += 101
    assert await sessions.find(session.id) is None


async def test_ending_a_session_forgets_it():
    sessions, _ = _sessions()
    session = await sessions.open("alice", "2025-06-18")
    assert session is not None
    assert await sessions.end(session.id) is True
    assert await sessions.find(session.id) is None
    assert await sessions.end(session.id) is False
    assert await sessions.find("") is None and await sessions.find("x" * 100) is None


async def test_a_node_opens_at_most_max_open_sessions():
    sessions, clock = _sessions(ttl=100, max_open=2)
    first = await sessions.open("a", "2025-11-25")
    assert first is not None and await sessions.open("b", "2025-11-25") is not None
    assert await sessions.open("c", "2025-11-25") is None  # the bound
    await sessions.end(first.id)
    assert await sessions.open("c", "2025-11-25") is not None
    assert await sessions.open("d", "2025-11-25") is None
    clock.now += 101  # expired sessions no longer count
    assert await sessions.open("d", "2025-11-25") is not None


def _record(agent_id: str, tools: list[Any]) -> AgentRecord:
    return AgentRecord(agent_id, "n1", f"c-{agent_id}", metadata={"mcp_tools": tools})


class Members:
    def __init__(self) -> None:
        self.by_space: dict[str, list[AgentRecord]] = {}
        self.reads = 0
        self.down = False

    async def __call__(self, space: str, limit: int) -> list[AgentRecord]:
        self.reads += 1
        if self.down:
            raise BackplaneUnavailable("down")
        return self.by_space.get(space, [])[:limit]


def _catalog(members: Members, clock: Clock, **kw: Any) -> tuple[ToolCatalog, list[int]]:
    changes: list[int] = []
    options = {"ttl": 1.0, "scan_limit": 10, "max_tools": 100, "exclude": ("mcp",), **kw}
    catalog = ToolCatalog(
        ("tools", "more"), members, on_change=lambda: changes.append(1), clock=clock, **options
    )
    return catalog, changes


async def test_the_catalog_reads_members_at_most_once_per_ttl():
    members, clock = Members(), Clock()
    members.by_space["tools"] = [_record("bot", [{"name": "a"}]), _record("mcp", [{"name": "x"}])]
    catalog, changes = _catalog(members, clock)
    assert list(await catalog.tools()) == ["bot.a"]
    assert changes == [1] and catalog.version == 1
    reads = members.reads
    await catalog.tools()
    assert members.reads == reads  # fresh enough
    clock.now += 1.0
    await catalog.tools()
    assert members.reads > reads and changes == [1]  # read again, nothing changed
    catalog.invalidate()
    members.by_space["more"] = [_record("bot", [{"name": "a"}]), _record("x2", [{"name": "b"}])]
    assert list(await catalog.tools()) == ["bot.a", "x2.b"]  # "more" < "tools": bot.a from "more"
    assert (await catalog.tools())["bot.a"].space == "more"
    assert catalog.version == 2


async def test_an_unknown_name_is_looked_up_once_more_fresh():
    members, clock = Members(), Clock()
    catalog, _ = _catalog(members, clock)
    assert await catalog.find("late.tool") is None
    members.by_space["tools"] = [_record("late", [{"name": "tool"}])]
    reads = members.reads
    assert await catalog.find("late.tool") is None  # just read: not again at once
    assert members.reads == reads
    clock.now += 0.1  # a tenth of the TTL later, an unknown name gets one fresh look
    found = await catalog.find("late.tool")
    assert found is not None and found.agent_id == "late"


async def test_concurrent_reads_share_one_and_failures_reach_everyone():
    members, clock = Members(), Clock()
    members.by_space["tools"] = [_record("bot", [{"name": "a"}])]
    catalog, _ = _catalog(members, clock)
    results = await asyncio.gather(*(catalog.tools() for _ in range(5)))
    assert all(list(r) == ["bot.a"] for r in results)
    assert members.reads == 2  # one read of the two spaces
    members.down = True
    catalog.invalidate()
    outcomes = await asyncio.gather(*(catalog.tools() for _ in range(3)), return_exceptions=True)
    assert all(isinstance(o, BackplaneUnavailable) for o in outcomes)


async def test_the_catalog_lists_at_most_max_tools():
    members, clock = Members(), Clock()
    members.by_space["tools"] = [_record(f"a{i}", [{"name": "t"}]) for i in range(5)]
    catalog, _ = _catalog(members, clock, max_tools=3)
    assert list(await catalog.tools()) == ["a0.t", "a1.t", "a2.t"]


async def test_the_catalog_lists_at_most_max_bytes_of_tools():
    members, clock = Members(), Clock()
    schema = {"type": "object", "description": "x" * 1000}
    members.by_space["tools"] = [
        _record(f"a{i}", [{"name": "t", "inputSchema": schema}]) for i in range(5)
    ]
    catalog, _ = _catalog(members, clock, max_bytes=2500)
    assert list(await catalog.tools()) == ["a0.t", "a1.t"]


async def test_the_catalog_reads_at_most_scan_limit_members_per_space():
    members, clock = Members(), Clock()
    members.by_space["tools"] = [_record(f"a{i}", [{"name": "t"}]) for i in range(5)]
    catalog, _ = _catalog(members, clock, scan_limit=2)
    assert list(await catalog.tools()) == ["a0.t", "a1.t"]


class SlowHost:
    """The system spaces and the space reads a call log is started with:
    publish_system blocks until released, so events pile up. ``mcp.calls``
    has the relay and ``watchers`` as its members."""

    def __init__(self, watchers: tuple[str, ...] = ("observer",)) -> None:
        self.published: list[dict[str, Any]] = []
        self.release = asyncio.Event()
        self.three = asyncio.Event()
        self.first = asyncio.Event()
        self.counted = asyncio.Event()
        self.watchers = watchers

    def local_members(self, space: str) -> int:
        return 1  # the relay

    async def member_records(self, space: str, limit: int) -> list[AgentRecord]:
        assert space == "mcp.calls"
        self.counted.set()
        return [AgentRecord(a, "n1", f"c-{a}") for a in ("mcp", *self.watchers)][:limit]

    async def publish_system(
        self, space: str, data: dict[str, Any], *, to: tuple[str, ...] | None = None
    ) -> None:
        assert to == ("mcp",)  # to the relay, which shows each observer what it may see
        await self.release.wait()
        self.published.append(data)
        self.first.set()
        if len(self.published) == 3:
            self.three.set()


async def test_mcp_calls_events_past_the_backlog_bound_are_dropped():
    host = SlowHost()
    log = CallLog("node-1", max_pending=2, relay="mcp")
    log.start(host, host)  # type: ignore[arg-type]
    log.call("c1", "spaces_list", "alice", None, {})
    await asyncio.sleep(0)  # the publisher takes the first and blocks on it
    log.result("c1", "spaces_list", "alice", None, None, 0.01)
    log.call("c2", "space_ask", "alice", "lab", {"text": "x" * 10_000})
    log.result("c2", "space_ask", "alice", "lab", "Timeout", 1.0)  # over the bound
    assert log.dropped == 1
    host.release.set()
    async with asyncio.timeout(5):
        await host.three.wait()
    await log.aclose()
    first, second, third = host.published
    assert first == {
        "event": "call", "call_id": "c1", "tool": "spaces_list", "caller": "alice",
        "node": "node-1", "space": None, "arguments": {},
    }  # fmt: skip
    assert second["event"] == "result" and second["is_error"] is False
    assert third["arguments_bytes"] > 10_000 and "arguments" not in third
    assert third["space"] == "lab"


async def test_mcp_calls_events_are_made_only_while_someone_may_watch():
    host = SlowHost(watchers=())
    host.release.set()
    log = CallLog("node-1", max_pending=10, relay="mcp")
    log.start(host, host)  # type: ignore[arg-type]
    async with asyncio.timeout(5):
        await host.counted.wait()  # the first count: only the relay is a member
    assert not log.observed
    log.call("c1", "spaces_list", "alice", None, {})
    log.result("c1", "spaces_list", "alice", None, None, 0.01)
    assert log.pending == 0 and log.dropped == 0  # not made at all
    # An observer joins: the relay hears it, and the next call is told.
    log.show({"type": "space.members", "space": "mcp.calls", "member_count": 2,
              "joined": "observer", "left": None})  # fmt: skip
    log.call("c2", "spaces_list", "alice", None, {})
    async with asyncio.timeout(5):
        await host.first.wait()
    assert [e["call_id"] for e in host.published] == ["c2"]
    # It leaves: nothing more is made.
    log.show({"type": "space.members", "space": "mcp.calls", "member_count": 1,
              "joined": None, "left": "observer"})  # fmt: skip
    log.result("c2", "spaces_list", "alice", None, None, 0.01)
    assert log.pending == 0
    await log.aclose()
    assert len(host.published) == 1


# ── the calls running ──────────────────────────────────────────────────────


async def _running(calls: RunningCalls, key: tuple[str, str, str | int]) -> tuple[Any, ...]:
    """A call as the server runs one, in its own task: what it ended with,
    whether the stop was its own, and the task's pending cancellations."""
    entered = asyncio.Event()
    outcome: list[Any] = []

    async def call() -> None:
        task = asyncio.current_task()
        assert task is not None
        running = RunningCall(task)
        digest = calls.add(key, running)
        try:
            entered.set()
            await asyncio.sleep(3600)
            outcome.append("answered")
        except asyncio.CancelledError:
            if not running.stopped():
                outcome.append("cancelled")
                raise
            outcome.append("stopped")
        finally:
            calls.remove(digest, running)
            running.done()
        outcome.append(task.cancelling())

    task = asyncio.get_running_loop().create_task(call())
    await entered.wait()
    return task, outcome


async def test_a_call_stopped_by_its_client_ends_and_its_task_is_not_left_cancelling():
    calls = RunningCalls()
    task, outcome = await _running(calls, ("alice", "s1", 7))
    assert not calls.cancel(call_digest("alice", "s2", 7))  # another session's id
    assert calls.cancel(call_digest("alice", "s1", 7))
    assert calls.cancel(call_digest("alice", "s1", 7))  # told twice: one stop
    await task
    assert outcome == ["stopped", 0] and len(calls) == 0
    assert not calls.cancel(call_digest("alice", "s1", 7))  # over: nothing to stop


async def test_a_call_cancelled_otherwise_stays_cancelled_even_when_also_stopped():
    calls = RunningCalls()
    task, outcome = await _running(calls, ("alice", "s1", "x"))
    task.cancel()  # the hub shutting down
    calls.cancel(call_digest("alice", "s1", "x"))
    with pytest.raises(asyncio.CancelledError):
        await task
    assert outcome == ["cancelled"] and len(calls) == 0


async def test_a_stop_after_the_call_is_over_does_nothing():
    running = RunningCall(asyncio.current_task())  # type: ignore[arg-type]
    running.done()
    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    running.client_gone(gone)
    await asyncio.sleep(0)  # not cancelled
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_stop_the_call_swallowed_is_taken_back_when_it_is_over():
    calls = RunningCalls()
    entered = asyncio.Event()

    async def call() -> int:
        task = asyncio.current_task()
        assert task is not None
        running = RunningCall(task)
        digest = calls.add(("bob", "", 1), running)
        try:
            entered.set()
            with contextlib.suppress(asyncio.CancelledError):  # as a failed ask would
                await asyncio.sleep(3600)
        finally:
            calls.remove(digest, running)
            running.done()
        await asyncio.sleep(0)  # answering goes on, not cancelled
        return task.cancelling()

    task = asyncio.get_running_loop().create_task(call())
    await entered.wait()
    assert calls.cancel(call_digest("bob", "", 1))
    assert await task == 0
