"""A2A, inbound: an A2A client talks to the agents of a space (contract §13).

For every space declared with ``a2a = true`` the HTTP port serves::

    GET  /.well-known/agent-card.json                         the hub's own card
    GET  /a2a/{space}/.well-known/agent-card.json             the space's card
    POST /a2a/{space}                                         JSON-RPC 2.0
    GET  /a2a/{space}/{agent_id}/.well-known/agent-card.json  a member's card
    POST /a2a/{space}/{agent_id}                              JSON-RPC, to that member

``SendMessage`` / ``SendStreamingMessage`` publish the message into the space
from the shared virtual agent ``a2a`` (one copy per node, so any node behind a
load balancer serves a request); the first event answering it (``data.
in_reply_to``) makes the task's outcome (:mod:`adapters.a2a.runs`). Replies
reach every node's copy; only the node holding the request relays them.
Tasks live in the key-value store (:mod:`adapters.a2a.store`): ``GetTask``,
``ListTasks``, ``CancelTask``, ``SubscribeToTask`` (:mod:`adapters.a2a.follows`)
and a multi-turn task's next message work on any node.

Who may do what is the hub's policy's to say, for the caller its bearer
token names (contract §18): a space the caller may not read is answered
exactly like one that is not an A2A agent, and a member URL naming an agent
that is not in the space like both (404, card and every JSON-RPC method
alike, before the body is read — no existence oracle); sending needs publish
there (403). With auth on, cards too want a token unless
``a2a_cards_public`` is set.

Bounded (:class:`InboundOptions`): request bodies (413), parts per message,
turns per task, tasks open on this node (and, apart, those the agents work on
in the background) and SSE streams on this node (503
with ``Retry-After``; a caller holding its ``caller_share`` of them: 429),
the reply kept per task, and every wait (``bridge_timeout`` →
``TASK_STATE_FAILED`` "Timeout"). A task is stored before its message is
published: one the cluster's store cannot keep is refused (503, ``-32603``),
never acknowledged and lost; one whose message is then refused (404, 429,
503) is removed again, never kept unacknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import structlog
from aiohttp import web

from adapters.a2a import answers, listing
from adapters.a2a.answers import Refused
from adapters.a2a.cards import hub_card, member_card, space_card
from adapters.a2a.follows import Follow
from adapters.a2a.member import GatewayMember
from adapters.a2a.runs import TaskRun
from adapters.a2a.store import TaskStore
from adapters.a2a.tasks import NodeTasks
from adapters.kit.asking import Asker
from adapters.kit.replies import ReplyWaiters
from adapters.kit.shares import ShareExceeded, Shares
from hub.adapter_host import (
    AdapterHost,
    AgentIdTaken,
    AuthError,
    BackplaneUnavailable,
    BodyRefused,
    Caller,
    HttpFaces,
    SlotsFull,
    SpaceReads,
    check_json,
    read_body,
)
from protocol import codec
from protocol.a2a import jsonrpc
from protocol.a2a.card import WELL_KNOWN
from protocol.a2a.jsonrpc import RpcError, RpcRequest
from protocol.a2a.mapping import VIA, cancel_data, is_working, request_data
from protocol.a2a.model import (
    SendParams,
    TaskState,
    list_query,
    send_params,
    task_query,
)
from protocol.a2a.tasks import TaskRecord, new_id
from protocol.names import is_valid_agent_id

log = structlog.get_logger("adapters.a2a")

PUSH_METHODS = frozenset(
    {
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    }
)
UNSUPPORTED_METHODS = frozenset({"GetExtendedAgentCard"})

Method = Callable[
    [web.Request, RpcRequest, str, "str | None", Caller], Awaitable[web.StreamResponse]
]


@dataclass(frozen=True, slots=True)
class SpaceCard:
    """How a space introduces itself (``a2a_name``, ``a2a_description``)."""

    name: str | None = None
    description: str | None = None


@dataclass(frozen=True, slots=True)
class InboundOptions:
    #: Largest request body; None: the hub's ``max_frame_bytes``.
    max_body_bytes: int | None = None
    #: Parts in one message.
    max_parts: int = 64
    #: Tasks with a turn in progress on this node (waiting for their answer).
    max_open_tasks: int = 256
    #: Of those, tasks the agents said they work on in the background (after a
    #: progress note they count here, no longer against ``max_open_tasks``).
    max_background_tasks: int = 4096
    #: ``SendStreamingMessage`` responses open on this node.
    max_streams: int = 128
    #: Reply text and data kept per task (all turns); more fails the task.
    max_reply_bytes: int = 1024 * 1024
    #: Turns (messages) per task.
    max_turns: int = 16
    #: Members read for a card.
    member_scan_limit: int = 200
    #: How often this node looks for cancels of its open tasks made on other nodes.
    cancel_poll: float = 1.0
    #: An SSE comment line after this much silence, so proxies keep the stream.
    keepalive: float = 15.0


class A2aGateway:
    """The inbound adapter: routes on the HTTP port, the ``a2a`` member."""

    system_spaces: tuple[str, ...] = ()

    def __init__(self, spaces: Mapping[str, SpaceCard], options: InboundOptions | None = None):
        self.spaces = dict(spaces)
        self.options = options or InboundOptions()
        self.waiters = ReplyWaiters(self.options.max_reply_bytes, own=VIA)
        o = self.options
        #: Tasks with a turn in progress here, and SSE responses open here
        #: (made anew with the hub's ``caller_share`` at start).
        self.task_slots = Shares(o.max_open_tasks, 1.0, "A2A tasks open")
        self.stream_slots = Shares(o.max_streams, 1.0, "A2A streams open")
        self.background_slots = Shares(o.max_background_tasks, 1.0, "A2A background tasks")
        #: Every JSON-RPC method the gateway answers, and what answers it.
        self.methods: dict[str, Method] = {
            "SendMessage": self._send_message,
            "SendStreamingMessage": self._send_message,
            "GetTask": self._get_task,
            "CancelTask": self._cancel_task,
            "ListTasks": self._list_tasks,
            "SubscribeToTask": self._subscribe,
            **dict.fromkeys(PUSH_METHODS, self._push_config),
            **dict.fromkeys(UNSUPPORTED_METHODS, self._unsupported),
        }
        self.member = GatewayMember(self.spaces, member_scan_limit=self.options.member_scan_limit)
        #: Publishes each turn's request and tells the agent to stop (adapters.kit.asking).
        self.asker = Asker(self.member.joining, self.waiters)
        self._tasks: NodeTasks | None = None
        self.timeout = 30.0
        self.max_body_bytes = self.options.max_body_bytes or 1024 * 1024
        #: The HTTP port's callers and policy, and the spaces' members (set at start).
        self._http: HttpFaces | None = None
        self._spaces: SpaceReads | None = None
        self._cards_public = False
        self._background: list[asyncio.Task[None]] = []
        #: ``SubscribeToTask`` streams of this node following a task served elsewhere.
        self._follows: set[Follow] = set()

    # ── lifecycle ────────────────────────────────────────────────────────

    async def start(self, host: AdapterHost) -> None:
        s = host.settings
        self._http, self._spaces, self._cards_public = host.http, host.spaces, s.a2a_cards_public
        self.timeout = s.bridge_timeout
        self.max_body_bytes = self.options.max_body_bytes or s.max_frame_bytes
        o = self.options
        self.task_slots = Shares(o.max_open_tasks, s.caller_share, "A2A tasks open")
        self.stream_slots = Shares(o.max_streams, s.caller_share, "A2A streams open")
        self.background_slots = Shares(
            o.max_background_tasks, s.caller_share, "A2A background tasks"
        )
        self._tasks = NodeTasks(TaskStore(host.kv, s.history_ttl))
        retry = min(1.0, s.heartbeat_interval)
        # Answers go to their waiting run in the delivery itself (_take).
        await self.member.start(
            host.hosting, host.spaces, self._on_message, self._take, retry=retry
        )
        watch = self._tasks.watch_cancels(self.options.cancel_poll)
        self._background.append(asyncio.get_running_loop().create_task(watch))
        base, member = "/a2a/{space}", "/a2a/{space}/{agent_id}"
        host.http.mount(
            [
                web.get(f"/{WELL_KNOWN}", self._hub_card),
                web.get(f"{base}/{WELL_KNOWN}", self._card),
                web.get(f"{member}/{WELL_KNOWN}", self._card),
                web.post(base, self._post),
                web.post(member, self._post),
            ],
            on_shutdown=self._on_shutdown,
        )

    @property
    def streams(self) -> int:
        """SSE responses open on this node."""
        return self.stream_slots.taken

    @property
    def tasks(self) -> NodeTasks:
        """This node's tasks (once started)."""
        assert self._tasks is not None, "the gateway is not started"
        return self._tasks

    async def aclose(self) -> None:
        for task in self._background:
            task.cancel()
        for follow in list(self._follows):
            follow.close()
        for run in list(self.tasks.runs.values()) if self._tasks is not None else ():
            run.abort()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.asker.aclose()
        await self.member.aclose()

    async def _on_message(self, msg: dict[str, Any]) -> None:
        for follow in self._follows:
            follow.feed(msg)
        if self._working(msg):
            return
        self.waiters.feed(msg)

    def _take(self, msg: dict[str, Any]) -> bool:
        """An answer for a run here, handed over in its delivery — unless a
        task is followed here (every message goes to the follows) or it is a
        progress note: those go to :meth:`_on_message`."""
        if self._follows:
            return False
        data = msg.get("data")
        if isinstance(data, dict) and is_working(data):
            return False
        return self.waiters.take(msg)

    def _working(self, msg: dict[str, Any]) -> bool:
        """A progress note (``{in_reply_to, state: "working"}``) for a turn served
        here goes to its run, not to the waiters: it is not the answer."""
        data = msg.get("data")
        if msg.get("type") != "space.event" or not isinstance(data, dict) or not is_working(data):
            return False
        answered = data.get("in_reply_to")
        run = self.tasks.by_event.get(answered) if isinstance(answered, str) else None
        if run is None or msg.get("space") != run.record.space:
            return False
        if run.record.to is not None and msg.get("from") != run.record.to:
            return False
        run.working(data)
        return True

    async def _on_shutdown(self) -> None:
        """The HTTP port is closing: open tasks fail now, so their clients get
        an answer rather than a cut connection."""
        runs = self.tasks.stop_all("Hub shutting down: try again")
        await asyncio.gather(*(run.wait_closed() for run in runs))

    # ── routes ───────────────────────────────────────────────────────────

    async def _hub_card(self, request: web.Request) -> web.Response:
        """``/.well-known/agent-card.json`` at the port's root: the hub's own
        card, one skill (and one interface) per A2A space the caller may read."""
        assert self._http is not None
        try:
            caller = await self._caller(request, public=self._cards_public)
        except Refused as refused:
            return refused.response
        visible = {
            space: (info.name, info.description)
            for space, info in sorted(self.spaces.items())
            if self._http.policy.may_read(caller, space)
        }
        card = hub_card(
            f"{self._http.public_url(request)}/a2a", visible, bearer=self._http.auth_required
        )
        return web.Response(body=orjson.dumps(card), content_type="application/json")

    async def _card(self, request: web.Request) -> web.Response:
        assert self._http is not None and self._spaces is not None
        space, agent = request.match_info["space"], request.match_info.get("agent_id")
        try:
            caller = await self._caller(request, public=self._cards_public)
        except Refused as refused:
            return refused.response
        try:
            await self._served(request, caller, space, agent)
            members = await self._spaces.member_records(space, self.options.member_scan_limit)
        except Refused as refused:
            return refused.response
        except BackplaneUnavailable:
            return answers.unavailable()
        url = f"{self._http.public_url(request)}/a2a/{space}"
        bearer = self._http.auth_required
        if agent is None:
            info = self.spaces[space]
            card = space_card(
                space, url, members, name=info.name, description=info.description, bearer=bearer
            )
        else:
            record = next((r for r in members if r.agent_id == agent), None)
            if record is None:  # a member past the scan, or whose record is gone
                return answers.not_found(f"No A2A agent at {request.path[:200]}")
            card = member_card(space, f"{url}/{agent}", record, bearer=bearer)
        return web.Response(body=orjson.dumps(card), content_type="application/json")

    async def _served(
        self, request: web.Request, caller: Caller, space: str, agent: str | None
    ) -> None:
        """Does anyone answer at this URL, for ``caller``? A space that is not
        served or that the caller may not read, or an agent that is not a
        member of it (the gateway's own ``a2a`` included), is 404 — for cards
        and every JSON-RPC method alike, so that no route tells more than
        another (contract §18). One membership read for a member's URL.
        Raises :class:`Refused` (404) and :class:`BackplaneUnavailable`."""
        assert self._http is not None and self._spaces is not None
        if space not in self.spaces or not self._http.policy.may_read(caller, space):
            raise Refused(answers.not_found(f"No A2A agent at {request.path[:200]}"))
        if agent is None:
            return
        if (
            agent == VIA
            or not is_valid_agent_id(agent)
            or not await self._spaces.is_member(space, agent)
        ):
            raise Refused(answers.not_found(f"No A2A agent at {request.path[:200]}"))

    async def _post(self, request: web.Request) -> web.StreamResponse:
        space, agent = request.match_info["space"], request.match_info.get("agent_id")
        try:
            # Who first: whether a space is served is nobody's business before
            # that; then whether anyone answers here (404, as the card), before
            # the body is read (docs/a2a.md, "Errors and HTTP statuses").
            caller = await self._caller(request)
            try:
                await self._served(request, caller, space, agent)
            except BackplaneUnavailable:
                return answers.unavailable()
            version = request.headers.get("A2A-Version", "1.0").strip()
            rpc = jsonrpc.parse_request(await self._read_json(request))
            if version.split(".", 1)[0] != "1":
                raise RpcError(
                    jsonrpc.VERSION_NOT_SUPPORTED,
                    f"A2A version {version[:16]!r} is not supported: this gateway speaks 1.0",
                    rpc.id,
                )
            return await self._call(request, rpc, space, agent, caller)
        except Refused as refused:
            return refused.response
        except RpcError as error:
            return answers.rpc_error(error)

    async def _call(
        self, request: web.Request, rpc: RpcRequest, space: str, agent: str | None, caller: Caller
    ) -> web.StreamResponse:
        try:
            return await self._dispatch(request, rpc, space, agent, caller)
        except RpcError as error:
            raise error if error.rpc_id is not None else error.with_id(rpc.id) from None
        except BackplaneUnavailable:
            return answers.unavailable(rpc.id)

    async def _dispatch(
        self, request: web.Request, rpc: RpcRequest, space: str, agent: str | None, caller: Caller
    ) -> web.StreamResponse:
        method = self.methods.get(rpc.method)
        if method is None:
            raise RpcError(
                jsonrpc.METHOD_NOT_FOUND, f"Method not found: {rpc.method[:128]}", rpc.id
            )
        return await method(request, rpc, space, agent, caller)

    async def _send_message(
        self, request: web.Request, rpc: RpcRequest, space: str, agent: str | None, caller: Caller
    ) -> web.StreamResponse:
        assert self._http is not None
        if not self._http.policy.may_publish(caller, space):
            # The caller may read the space (else 404 already): sending is 403,
            # whatever its params say.
            error = RpcError(
                jsonrpc.INVALID_REQUEST, f"Not allowed to send to the space {space!r}", rpc.id
            )
            raise Refused(answers.rpc_error(error, 403))
        params = send_params(rpc.params, rpc.id, max_parts=self.options.max_parts)
        return await self._send(request, rpc, params, space, agent, caller)

    async def _get_task(
        self, request: web.Request, rpc: RpcRequest, space: str, agent: str | None, caller: Caller
    ) -> web.StreamResponse:
        query = task_query(rpc.params, rpc.id)
        record = await self.tasks.visible(query.id, space, self._owner(caller))
        return answers.result(rpc.id, self.tasks.wire(record, query.historyLength))

    async def _list_tasks(
        self, request: web.Request, rpc: RpcRequest, space: str, agent: str | None, caller: Caller
    ) -> web.StreamResponse:
        query = list_query(rpc.params, rpc.id)
        records = await self.tasks.listed(space, self._owner(caller))
        shown = listing.page(records, query, rpc.id, to=agent, wire=self.tasks.wire)
        return answers.result(rpc.id, shown)

    async def _subscribe(
        self, request: web.Request, rpc: RpcRequest, space: str, agent: str | None, caller: Caller
    ) -> web.StreamResponse:
        """``SubscribeToTask``: the task as it is, then its updates until its
        turn ends — from the run if this node serves it, else followed
        through the space and the store (:class:`Follow`). Unknown:
        ``-32001``; a task that is over: ``-32004``, as a2a-sdk — each
        answered as a stream of that one error (:func:`answers.stream_error`)."""
        try:
            query = task_query(rpc.params, rpc.id)
            record = await self.tasks.visible(query.id, space, self._owner(caller))
            if record.terminal:
                raise RpcError(
                    jsonrpc.UNSUPPORTED_OPERATION,
                    f"Task {record.id} is in terminal state: {record.state.value}",
                    rpc.id,
                )
        except RpcError as error:
            return answers.stream_error(
                error if error.rpc_id is not None else error.with_id(rpc.id)
            )
        key = caller.share_key
        try:
            self.stream_slots.take(key)
        except SlotsFull as exc:
            raise Refused(answers.busy(rpc.id, f"{exc}: try again")) from None
        except ShareExceeded as exc:
            raise Refused(answers.over_share(rpc.id, str(exc))) from None
        try:
            run = self.tasks.runs.get(record.id)
            if run is not None:
                queue = run.subscribe()
                return await answers.stream(
                    request, rpc.id, queue, keepalive=self.options.keepalive,
                    gone=lambda: run.detach(queue),
                )  # fmt: skip
            await self.member.join(space, rpc.id)  # the answer comes through the space
            follow = Follow(
                record, self.tasks.store, poll=self.options.cancel_poll, timeout=self.timeout
            )
            if record.state is not TaskState.WORKING:
                follow.queue.put_nowait(None)  # waiting for input: nothing runs to follow
                return await answers.stream(
                    request, rpc.id, follow.queue, keepalive=self.options.keepalive,
                    gone=follow.close,
                )  # fmt: skip
            self._follows.add(follow)
            follow.start()
            try:
                return await answers.stream(
                    request, rpc.id, follow.queue, keepalive=self.options.keepalive,
                    gone=follow.close,
                )  # fmt: skip
            finally:
                follow.close()
                self._follows.discard(follow)
        finally:
            self.stream_slots.give_back(key)

    async def _cancel_task(
        self, request: web.Request, rpc: RpcRequest, space: str, agent: str | None, caller: Caller
    ) -> web.StreamResponse:
        record = await self._cancel(task_query(rpc.params, rpc.id).id, space, caller)
        return answers.result(rpc.id, record.wire())

    async def _push_config(
        self, request: web.Request, rpc: RpcRequest, space: str, agent: str | None, caller: Caller
    ) -> web.StreamResponse:
        raise RpcError(
            jsonrpc.PUSH_NOTIFICATION_NOT_SUPPORTED,
            "Push notifications are not supported by this agent",
            rpc.id,
        )

    async def _unsupported(
        self, request: web.Request, rpc: RpcRequest, space: str, agent: str | None, caller: Caller
    ) -> web.StreamResponse:
        raise RpcError(
            jsonrpc.UNSUPPORTED_OPERATION, f"{rpc.method} is not supported by this agent", rpc.id
        )

    # ── the request's envelope ───────────────────────────────────────────

    async def _caller(self, request: web.Request, *, public: bool = False) -> Caller:
        assert self._http is not None
        try:
            return await self._http.caller(request, public=public, prefix="a2a-caller")
        except AuthError:
            raise Refused(answers.unauthorized()) from None
        except AgentIdTaken as exc:
            raise Refused(answers.conflict(str(exc))) from None

    async def _read_json(self, request: web.Request) -> Any:
        """The request body as JSON, bounded in size (413) and nesting (400).

        The one place a body is read: only after it is whole and valid does a
        request take a slot (an open task, a stream)."""
        try:
            body = await read_body(request, self.max_body_bytes)
            obj = jsonrpc.decode(body)  # -32700 for what is not JSON
            check_json(body.decode("utf-8", "replace"), obj)
        except BodyRefused as exc:
            error = RpcError(jsonrpc.INVALID_REQUEST, exc.message)
            raise Refused(answers.rpc_error(error, exc.status)) from None
        return obj

    # ── SendMessage / SendStreamingMessage ───────────────────────────────

    async def _send(
        self,
        request: web.Request,
        rpc: RpcRequest,
        params: SendParams,
        space: str,
        agent: str | None,
        caller: Caller,
    ) -> web.StreamResponse:
        config = params.configuration
        if config is not None and config.taskPushNotificationConfig is not None:
            raise RpcError(
                jsonrpc.PUSH_NOTIFICATION_NOT_SUPPORTED,
                "Push notifications are not supported by this agent",
                rpc.id,
            )
        streaming = rpc.method == "SendStreamingMessage"
        key = caller.share_key
        held = [self.task_slots, self.stream_slots] if streaming else [self.task_slots]
        taken: list[Shares] = []
        try:
            for slots in held:
                slots.take(key)
                taken.append(slots)
            run = await self._start_turn(rpc, params, space, agent, caller, key)
        except BaseException as exc:
            for slots in taken:
                slots.give_back(key)
            if isinstance(exc, SlotsFull):
                raise Refused(answers.busy(rpc.id, f"{exc}: try again")) from None
            if isinstance(exc, ShareExceeded):
                raise Refused(answers.over_share(rpc.id, str(exc))) from None
            raise
        # The run holds its task slot until it is done (_run_done), the
        # stream its stream slot until the response ends.
        if streaming:
            listener = run.listen()
            self.tasks.add(run)
            run.start(self._run_done)
            try:
                # A client that leaves mid-answer: the task goes on, stored for GetTask.
                return await answers.stream(
                    request, rpc.id, listener, keepalive=self.options.keepalive, gone=run.detach
                )
            finally:
                self.stream_slots.give_back(key)
        self.tasks.add(run)
        run.start(self._run_done)
        history = config.historyLength if config is not None else None
        if config is None or not config.returnImmediately:
            # Blocking: until the turn ends (a terminal or interrupted state)
            # or the agents say they go on in the background (WORKING).
            await run.answered.wait()
        return answers.result(rpc.id, {"task": run.wire(history)})

    async def _start_turn(
        self,
        rpc: RpcRequest,
        params: SendParams,
        space: str,
        agent: str | None,
        caller: Caller,
        key: str,
    ) -> TaskRun:
        """The turn's request published; the run that will follow its answer.

        A refused publish (an agent that is not a member, the bridge rate
        limit, a node not ready …) leaves nothing behind: a new task's record
        is removed — it was never acknowledged — and a follow-up's task stays
        as it was (its turn released, the turn served here goes on)."""
        message = params.message
        owner = self._owner(caller)
        previous: TaskRun | None = None
        if message.taskId is None:
            record = await self._new_task(rpc, params, space, agent, caller)
        else:  # stored already; its next turn claimed in the store
            record, previous = await self.tasks.next_turn(
                message.taskId, message.contextId, space, owner, self.options.max_turns
            )
            record.user_message(message.model_dump(exclude_none=True))
        data = request_data(record.id, record.context_id, message, caller.agent_id)
        try:
            run = await self._publish_turn(record, data, rpc, key)
        except BaseException:
            if message.taskId is None:
                await self.tasks.forget(record)
            else:
                await self.tasks.release_turn(record, previous)
            raise
        if message.taskId is not None:
            self.tasks.continued(previous)
            return run
        try:
            await self.tasks.index(record, owner)  # listed once its message is out
        except BaseException:
            run.asking.close()  # cancelled meanwhile: no run will follow the answer
            raise
        return run

    async def _new_task(
        self, rpc: RpcRequest, params: SendParams, space: str, agent: str | None, caller: Caller
    ) -> TaskRecord:
        """A new task, stored (``WORKING``) before anything is published: one
        the cluster cannot keep is refused, never acknowledged. It enters the
        ``ListTasks`` index only once its message is published
        (:meth:`_start_turn`): a refused message leaves no entry there."""
        message = params.message
        now = codec.now_ms()
        record = TaskRecord(
            id=new_id(),
            context_id=message.contextId or new_id(),
            space=space, to=agent, caller=caller.agent_id,
            state=TaskState.WORKING, updated_ms=now, created_ms=now,
        )  # fmt: skip
        record.user_message(message.model_dump(exclude_none=True))
        try:
            await self.tasks.store.save(record)
        except BackplaneUnavailable as exc:
            log.warning("a2a task refused: not stored", task_id=record.id, reason=str(exc))
            busy = answers.busy(rpc.id, "The task cannot be stored now: try again")
            raise Refused(busy) from None
        return record

    async def _publish_turn(
        self, record: TaskRecord, data: dict[str, Any], rpc: RpcRequest, key: str
    ) -> TaskRun:
        """Publish the turn's request event; the run that will follow its answer."""
        asking = await self.member.ask(self.asker, record.space, data, record.to, rpc.id)
        record.event_id = asking.event_id
        record.move(TaskState.WORKING, codec.now_ms())
        run = TaskRun(
            record, asking, self.tasks.store,
            timeout=self.timeout, max_reply_bytes=self.options.max_reply_bytes,
            key=key, stored=record.turn == 1, rearm=lambda: self.waiters.relay(asking.asked),
        )  # fmt: skip
        run.on_background = self._backgrounded
        return run

    def _backgrounded(self, run: TaskRun) -> None:
        """The agents work on the run's task in the background: it counts
        against the (larger) bound of such tasks from now on, if there is room."""
        try:
            self.background_slots.take(run.key)
        except (SlotsFull, ShareExceeded):
            return  # it keeps its open task's slot
        self.task_slots.give_back(run.key)
        run.slot = "background"

    def _run_done(self, run: TaskRun) -> None:
        self.tasks.discard(run)
        slots = self.background_slots if run.slot == "background" else self.task_slots
        slots.give_back(run.key)
        run.asking.close()

    # ── GetTask / CancelTask ─────────────────────────────────────────────

    def _owner(self, caller: Caller) -> str | None:
        """Whose tasks a caller sees: its own with auth on, any without."""
        assert self._http is not None
        return caller.agent_id if self._http.auth_required else None

    async def _cancel(self, task_id: str, space: str, caller: Caller) -> TaskRecord:
        record = await self.tasks.cancel(task_id, space, self._owner(caller))
        try:
            data = cancel_data(task_id, record.event_id)
            await self.member.publish(space, data, record.to, None)
        except (RpcError, Refused) as exc:  # the agent left, say: cancelled all the same
            log.info("a2a cancel not announced", task_id=task_id, reason=str(exc))
        return record
