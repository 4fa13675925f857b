"""Running a ``tools/call``: the hub's five tools and the tools agents offer.

The caller is an agent (:class:`~hub.adapter_host.Caller`), judged by the
hub's one policy (:attr:`~hub.adapter_host.HttpFaces.policy`): what it may
read (``spaces_list`` shows only such spaces, ``space_history`` and
``agents_list {space}`` need it, ``agents_list`` without one shows only the
agents discovery lets it see) and where it may write (``space_publish``,
``space_ask`` and the agent tools of a space). Writes are published by the
shared agent ``mcp`` with ``data.caller`` naming the caller — a caller
cannot set it, nor ``data.from``.

Whatever fails once the call is under way — a refusal, a failure reply, no
reply within the wait — is a result with ``isError: true``; a tool the
caller cannot see is a JSON-RPC ``-32602``. Each call and its outcome are
told in ``mcp.calls``, to the observers who may read the space it targets.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import structlog

from adapters.kit.replies import Assembled
from adapters.mcp.agent import McpAgent, ToolFailure
from adapters.mcp.calllog import CallLog, new_call_id
from adapters.mcp.catalog import ToolCatalog
from adapters.mcp.options import McpOptions
from hub.adapter_host import BackplaneUnavailable, Caller, HttpFaces, SpaceReads
from protocol.mcp import jsonrpc
from protocol.mcp.results import (
    error_result,
    failure_text,
    is_failure,
    json_result,
    reply_event,
    reply_result,
)
from protocol.mcp.tools import (
    HUB_TOOL_NAMES,
    AgentsList,
    AgentTool,
    HubCall,
    SpaceAsk,
    SpaceHistory,
    SpacePublish,
    SpacesList,
    ToolArgumentError,
    hub_tools,
    is_user_space,
    parse_arguments,
)

#: Hears each delta of a streamed reply (``notifications/progress``).
Progress = Callable[[str], Awaitable[None]]

#: What an MCP request's data says about where it came from.
VIA = "mcp"

log = structlog.get_logger("adapters.mcp")


class ToolRunner:
    def __init__(
        self,
        http: HttpFaces,
        spaces: SpaceReads,
        agent: McpAgent,
        catalog: ToolCatalog,
        calls: CallLog,
        options: McpOptions,
        *,
        max_frame_bytes: int,
        bridge_timeout: float,
    ):
        """``http``: the hub's one policy; ``spaces``: the reads behind
        ``agents_list`` and ``space_history``. ``max_frame_bytes`` bounds an
        event published for a caller and an ``agents_list`` answer;
        ``bridge_timeout`` is how long a call waits for its reply unless the
        caller says."""
        self._http = http
        self._spaces = spaces
        self.max_frame_bytes = max_frame_bytes
        self.bridge_timeout = bridge_timeout
        self.agent = agent
        self.catalog = catalog
        self.calls = calls
        self.options = options
        self._hub_tools = hub_tools(options.max_wait)

    async def listing(self, caller: Caller) -> list[dict[str, Any]]:
        """The tools ``caller`` may call: the hub's, then the agents' of the
        spaces it may publish to. Raises ``BackplaneUnavailable``."""
        agent_tools = await self.catalog.tools()
        return [
            *self._hub_tools,
            *(t.listing() for t in agent_tools.values() if self._may_call(caller, t)),
        ]

    async def call(
        self,
        caller: Caller,
        request_id: Any,
        name: str,
        arguments: dict[str, Any],
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """The result of tool ``name``; ``JsonRpcError`` for an unknown tool.
        ``progress`` hears each delta of a streamed reply (agent tools, ``space_ask``)."""
        agent_tool = None
        if name not in HUB_TOOL_NAMES:
            try:
                agent_tool = await self.catalog.find(name)
            except BackplaneUnavailable:
                return error_result("The hub is unavailable: try again.")
            if agent_tool is None or not self._may_call(caller, agent_tool):
                raise jsonrpc.invalid_params(request_id, f"Unknown tool: {name[:200]}")
        call: HubCall | ToolArgumentError | None = None
        if agent_tool is None:
            try:
                call = parse_arguments(name, arguments, max_wait=self.options.max_wait)
            except ToolArgumentError as exc:
                call = exc
        space = agent_tool.space if agent_tool is not None else _target(call, arguments)
        # The call log's events are made only while someone may watch: no id otherwise.
        call_id = new_call_id() if self.calls.observed else ""
        if call_id:
            # A space given that is no name (a list, an object) says nothing of
            # who may read the call: it is shown as targeting none, without
            # its arguments (which may name a space, contract §18).
            named = space is not None or arguments.get("space") is None
            shown = arguments if named else None
            self.calls.call(call_id, name, caller.agent_id, space, shown)
        started = time.monotonic()
        try:
            if agent_tool is not None:
                result = await self._agent_tool(caller, agent_tool, arguments, progress)
            elif isinstance(call, ToolArgumentError):
                raise call
            else:
                assert call is not None
                result = await self._hub_tool(caller, call, progress)
        except asyncio.CancelledError:
            self._told(call_id, name, caller, space, "Cancelled", time.monotonic() - started)
            raise
        except (ToolFailure, ToolArgumentError) as exc:
            result = error_result(str(exc))
        except BackplaneUnavailable:
            result = error_result("The hub is unavailable: try again.")
        except Exception:
            # A bug of ours: the caller gets a tool error, the operator the traceback.
            log.exception("MCP tool call failed", tool=name[:200])
            result = error_result("Internal error in the hub.")
        error = result["content"][0]["text"] if result.get("isError") else None
        self._told(call_id, name, caller, space, error, time.monotonic() - started)
        return result

    def _told(
        self,
        call_id: str,
        name: str,
        caller: Caller,
        space: str | None,
        error: str | None,
        seconds: float,
    ) -> None:
        """The call's outcome in the call log, while someone may watch."""
        if self.calls.observed:
            call_id = call_id or new_call_id()
            self.calls.result(call_id, name, caller.agent_id, space, error, seconds)

    def _may_call(self, caller: Caller, tool: AgentTool) -> bool:
        return self._http.policy.may_publish(caller, tool.space)

    # ── the hub's tools ──────────────────────────────────────────────────

    async def _hub_tool(
        self, caller: Caller, call: HubCall, progress: Progress | None
    ) -> dict[str, Any]:
        match call:
            case SpacesList():
                reply = await self.agent.request({"type": "space.list"})
                spaces = [s for s in reply.get("spaces", []) if self._may_read(caller, s["id"])]
                return json_result({"spaces": spaces[: self.options.max_listed]})
            case AgentsList(capability=capability, space=space):
                if space is not None:
                    await self._check_read(caller, space)
                try:
                    records, more = await self._spaces.agents(
                        caller, capability=capability, space=space, limit=self.options.max_listed
                    )
                except ValueError as exc:
                    raise ToolFailure(f"refused: {str(exc)[:200]}") from None
                agents = [record.directory() for record in records]
                kept = _within(agents, self.max_frame_bytes)
                more = more or len(kept) < len(agents)
                return json_result({"agents": kept, "more": more})
            case SpacePublish(space=space, data=data, to=to):
                await self._check_write(caller, space)
                published = await self.agent.publish(space, self._stamped(data, caller), to)
                return json_result({"event_id": published["event_id"], "seq": published["seq"]})
            case SpaceHistory(space=space, limit=limit):
                await self._check_read(caller, space)
                events = await self._spaces.history(space, limit, caller.agent_id)
                # The publisher's own request id is no reader's business.
                events = [{k: v for k, v in e.items() if k != "request_id"} for e in events]
                return json_result({"space": space, "events": events})
            case SpaceAsk(space=space, text=text, to=to, timeout=timeout):
                await self._check_write(caller, space)
                data = self._stamped({"text": text}, caller)
                wait = timeout or self.bridge_timeout
                published, whole = await self._ask(space, data, to, wait, progress)
                if whole.failure is not None:
                    raise ToolFailure(f"The reply was lost: {whole.failure}.")
                if is_failure(whole.data):
                    return error_result(failure_text(whole.data))
                answer = {
                    "event_id": published["event_id"],
                    "seq": published["seq"],
                    "reply": reply_event(whole.event),
                }
                return json_result(answer)
        raise AssertionError(f"unhandled hub call {call!r}")

    def _may_read(self, caller: Caller, space: str) -> bool:
        return self._http.policy.may_read(caller, space)

    async def _check_read(self, caller: Caller, space: str) -> None:
        """A space the caller may not read answers as one that does not exist."""
        if not self._may_read(caller, space) or not await self._spaces.space_exists(space):
            raise ToolFailure(_absent(space))

    async def _check_write(self, caller: Caller, space: str) -> None:
        if not is_user_space(space):
            raise ToolFailure(f"{space!r} is a system space: nobody may publish there.")
        await self._check_read(caller, space)
        if not self._http.policy.may_publish(caller, space):
            raise ToolFailure(f"You may not publish to space {space!r}.")

    def _stamped(self, data: dict[str, Any], caller: Caller) -> dict[str, Any]:
        if data.get("cancel") is True and "in_reply_to" in data:
            # The hub's own word to an answering agent that its asker stopped
            # (contract §19): published from ``mcp``, it would stop any MCP
            # caller's request — only that caller's cancel may.
            raise ToolFailure(
                "data {cancel: true, in_reply_to} is the hub's own: cancel a call of yours "
                "with notifications/cancelled."
            )
        stamped = {**data, "via": VIA, "caller": caller.agent_id}
        limit = self.max_frame_bytes - 1024  # room for the frame around it
        if len(orjson.dumps(stamped)) > limit:
            raise ToolFailure(f"The event is too large: at most about {limit} bytes of JSON.")
        return stamped

    # ── agents' tools ────────────────────────────────────────────────────

    async def _agent_tool(
        self, caller: Caller, tool: AgentTool, arguments: dict[str, Any], progress: Progress | None
    ) -> dict[str, Any]:
        data = self._stamped({"tool": tool.name, "arguments": arguments}, caller)
        wait = self.bridge_timeout
        _published, whole = await self._ask(tool.space, data, [tool.agent_id], wait, progress)
        if whole.failure is not None:
            raise ToolFailure(f"The reply was lost: {whole.failure}.")
        return reply_result(whole.data)

    def _ask(
        self,
        space: str,
        data: dict[str, Any],
        to: list[str] | None,
        wait: float,
        progress: Progress | None,
    ) -> Awaitable[tuple[dict[str, Any], Assembled]]:
        if progress is None:
            return self.agent.ask(space, data, to, wait)
        return self.agent.ask_streaming(space, data, to, wait, progress)


def _absent(space: str) -> str:
    """What a caller hears of a space it may not read, and of one that does not
    exist: the same words (no existence oracle, contract §18)."""
    return f"Space {space!r} does not exist, or you may not read it."


def _target(call: HubCall | ToolArgumentError | None, arguments: dict[str, Any]) -> str | None:
    """The space a hub tool call targets (what ``mcp.calls`` shows it by):
    its ``space``, also when the arguments are otherwise wrong."""
    match call:
        case SpacesList():
            return None
        case AgentsList(space=space):
            return space
        case SpacePublish(space=space) | SpaceHistory(space=space) | SpaceAsk(space=space):
            return space
    named = arguments.get("space")
    return named if isinstance(named, str) else None


def _within(items: list[Any], budget: int) -> list[Any]:
    """The first ``items`` whose JSON fits in about ``budget`` bytes (at least one)."""
    kept, size = [], 0
    for item in items:
        size += len(orjson.dumps(item))
        if kept and size > budget:
            break
        kept.append(item)
    return kept
