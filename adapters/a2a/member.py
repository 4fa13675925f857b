"""The inbound gateway's virtual agent ``a2a``: one copy per node, in every A2A space.

It is *shared* (every node hosts one under the reserved id ``a2a``), so any
node behind a load balancer can publish a request and every node's copy
receives the replies. Joining needs the backplane (a Redis node is ready only
once subscribed): spaces that cannot be joined at start are joined in the
background, and by the first request that needs them (:mod:`adapters.kit.joined`).
A publish refused by the hub becomes the HTTP answer a client can act on
(:mod:`adapters.a2a.answers`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import structlog

from adapters.a2a import answers
from adapters.a2a.answers import Refused
from adapters.kit.asking import Asker, Asking
from adapters.kit.joined import JoiningMember, JoinRefused, NodeNotReady
from hub.adapter_host import (
    AdapterMember,
    AgentHosting,
    BackplaneUnavailable,
    MessageHandler,
    RequestFailed,
    SpaceReads,
    Take,
)
from protocol.a2a import jsonrpc
from protocol.a2a.jsonrpc import RequestId, RpcError
from protocol.a2a.mapping import VIA

log = structlog.get_logger("adapters.a2a")


class GatewayMember:
    def __init__(self, spaces: Iterable[str], *, member_scan_limit: int):
        self.spaces = tuple(spaces)
        self.member_scan_limit = member_scan_limit
        self.joining = JoiningMember(VIA, self.spaces, capabilities=("a2a",), label="a2a gateway")
        self._spaces: SpaceReads | None = None

    @property
    def member(self) -> AdapterMember | None:
        return self.joining.member

    async def start(
        self,
        hosting: AgentHosting,
        spaces: SpaceReads,
        handler: MessageHandler,
        take: Take | None = None,
        *,
        retry: float,
    ) -> None:
        """``take``: the member's synchronous first try on each message."""
        self._spaces = spaces
        await self.joining.start(hosting, handler, take, retry=retry)

    async def aclose(self) -> None:
        await self.joining.aclose()

    async def publish(
        self, space: str, data: dict[str, Any], to: str | None, rpc_id: RequestId
    ) -> str:
        """Publish ``data`` (to one member, or the space); its ``event_id``.
        Raises :class:`Refused` or :class:`RpcError` when the hub refuses."""
        try:
            published = await self.joining.publish(space, data, to=to)
        except (JoinRefused, RequestFailed, TimeoutError, NodeNotReady) as exc:
            raise await self.refusal(exc, space, to, rpc_id) from None
        return str(published["event_id"])

    async def ask(
        self, asker: Asker, space: str, data: dict[str, Any], to: str | None, rpc_id: RequestId
    ) -> Asking:
        """Publish a request through ``asker`` (its answer relayed piece by
        piece); refusals as :meth:`publish` raises them."""
        try:
            return await asker.send(space, data, to=to, relay=True)
        except (JoinRefused, RequestFailed, TimeoutError, NodeNotReady) as exc:
            raise await self.refusal(exc, space, to, rpc_id) from None

    async def refusal(
        self, exc: Exception, space: str, to: str | None, rpc_id: RequestId
    ) -> Exception:
        """What to answer for a publish the hub or the node refused."""
        if isinstance(exc, JoinRefused):
            return await self._refused(exc, space, None, rpc_id)
        if isinstance(exc, RequestFailed):
            return await self._refused(exc, space, to, rpc_id)
        return Refused(answers.unavailable(rpc_id))

    async def join(self, space: str, rpc_id: RequestId) -> None:
        """Be in ``space`` on this node (to follow a task served on another)."""
        try:
            await self.joining.join(space)
        except JoinRefused as exc:
            raise await self._refused(exc, space, None, rpc_id) from None
        except (TimeoutError, NodeNotReady):
            raise Refused(answers.unavailable(rpc_id)) from None

    async def _refused(
        self, exc: RequestFailed, space: str, to: str | None, rpc_id: RequestId
    ) -> Exception:
        """The hub refused the gateway's own request: the answer to give."""
        if exc.code == "RATE_LIMITED":
            return Refused(answers.rate_limited(rpc_id))
        if exc.code == "UNAVAILABLE":
            return Refused(answers.unavailable(rpc_id))
        if exc.code == "INVALID_REQUEST" and to is not None:
            assert self._spaces is not None
            with contextlib.suppress(BackplaneUnavailable):
                members = await self._spaces.member_records(space, self.member_scan_limit)
                if all(r.agent_id != to for r in members):
                    return Refused(answers.not_found(f"No agent {to!r} in the A2A space {space!r}"))
        log.warning("a2a request refused by the hub", code=exc.code, reason=str(exc))
        return RpcError(jsonrpc.INVALID_PARAMS, f"The hub refused the message: {exc}", rpc_id)
