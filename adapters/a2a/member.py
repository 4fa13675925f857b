"""The inbound gateway's virtual agent ``a2a``: one copy per node, in every A2A space.

It is *shared* (every node hosts one under the reserved id ``a2a``), so any
node behind a load balancer can publish a request and every node's copy
receives the replies. Joining needs the backplane (a Redis node is ready only
once subscribed): spaces that cannot be joined at start are joined in the
background, and by the first request that needs them. A publish refused by
the hub becomes the HTTP answer a client can act on (:mod:`adapters.a2a.answers`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

import structlog

from adapters.a2a import answers
from adapters.a2a.answers import Refused
from hub.adapter_host import (
    AdapterHost,
    BackplaneUnavailable,
    MessageHandler,
    RequestFailed,
    VirtualMember,
)
from protocol.a2a import jsonrpc
from protocol.a2a.jsonrpc import RequestId, RpcError
from protocol.a2a.mapping import VIA

log = structlog.get_logger("adapters.a2a")


class GatewayMember:
    def __init__(self, spaces: Iterable[str], *, member_scan_limit: int):
        self.spaces = tuple(spaces)
        self.member_scan_limit = member_scan_limit
        self.member: VirtualMember | None = None
        self._joined: set[str] = set()
        self._host: AdapterHost | None = None
        self._joiner: asyncio.Task[None] | None = None

    async def start(self, host: AdapterHost, handler: MessageHandler) -> None:
        self._host = host
        self.member = await host.attach(
            VIA, handler, shared=True, type="bridge", capabilities=("a2a",)
        )
        if not await self._join_all():
            retry = min(1.0, host.settings.heartbeat_interval)
            self._joiner = asyncio.get_running_loop().create_task(self._keep_joining(retry))

    async def aclose(self) -> None:
        if self._joiner is not None:
            self._joiner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._joiner
        if self.member is not None:
            await self.member.aclose()

    async def publish(
        self, space: str, data: dict[str, Any], to: str | None, rpc_id: RequestId
    ) -> str:
        """Publish ``data`` (to one member, or the space); its ``event_id``.
        Raises :class:`Refused` or :class:`RpcError` when the hub refuses."""
        assert self.member is not None
        await self._ensure_joined(space, rpc_id)
        for attempt in (1, 2):
            try:
                published = await self.member.publish(space, data, to=to, echo=False)
                return str(published["event_id"])
            except RequestFailed as exc:
                # Membership lost (Redis flushed, space re-created): join again, once.
                if attempt == 1 and exc.code in ("UNAUTHORIZED", "SPACE_NOT_FOUND"):
                    self._joined.discard(space)
                    await self._ensure_joined(space, rpc_id)
                    continue
                raise await self._refused(exc, space, to, rpc_id) from None
            except TimeoutError:
                raise Refused(answers.unavailable(rpc_id)) from None
        raise AssertionError("unreachable")

    async def stop_stream(self, space: str, stream_id: str) -> None:
        """Stop receiving a reply stream on this node (a receiver cancel)."""
        assert self.member is not None
        msg = {"type": "space.event.cancel", "space": space, "event_id": stream_id}
        with contextlib.suppress(RequestFailed, TimeoutError):
            await self.member.request(msg, timeout=5.0)

    async def _refused(
        self, exc: RequestFailed, space: str, to: str | None, rpc_id: RequestId
    ) -> Exception:
        """The hub refused the gateway's own request: the answer to give."""
        if exc.code == "RATE_LIMITED":
            return Refused(answers.rate_limited(rpc_id))
        if exc.code == "UNAVAILABLE":
            return Refused(answers.unavailable(rpc_id))
        if exc.code == "INVALID_REQUEST" and to is not None:
            assert self._host is not None
            with contextlib.suppress(BackplaneUnavailable):
                members = await self._host.member_records(space, self.member_scan_limit)
                if all(r.agent_id != to for r in members):
                    return Refused(answers.not_found(f"No agent {to!r} in the A2A space {space!r}"))
        log.warning("a2a request refused by the hub", code=exc.code, reason=str(exc))
        return RpcError(jsonrpc.INVALID_PARAMS, f"The hub refused the message: {exc}", rpc_id)

    async def _join_all(self) -> bool:
        """Join every space not joined yet, if the node is ready; True when done."""
        if self._host is None or not self._host.ready:
            return False
        for space in self.spaces:
            try:
                await self._ensure_joined(space, None)
            except (Refused, RpcError):
                log.warning("a2a gateway could not join yet", space=space)
        return self._joined.issuperset(self.spaces)

    async def _keep_joining(self, interval: float) -> None:
        # A join that fails half-way is rolled back in presence for the shared
        # id — undoing the other nodes' membership too — so joins wait for a
        # ready node and are retried until each space is joined.
        while True:
            await asyncio.sleep(interval)
            if await self._join_all():
                return

    async def _ensure_joined(self, space: str, rpc_id: RequestId) -> None:
        if space in self._joined:
            return
        if self._host is None or not self._host.ready:
            raise Refused(answers.unavailable(rpc_id))
        assert self.member is not None
        try:
            await self.member.join(space)
        except RequestFailed as exc:
            raise await self._refused(exc, space, None, rpc_id) from None
        except TimeoutError:
            raise Refused(answers.unavailable(rpc_id)) from None
        self._joined.add(space)
