"""An outbound bridge's agent id, held by exactly one node of a cluster.

Every outbound bridge (A2A, HTTP Agora, signed envelopes) holds its id with an
:class:`AgentIdClaim`: it claims the id (a virtual member, :meth:`AgentHosting.attach`)
and joins the bridge's space with it. A node that cannot claim it — another
node holds it — stands by and tries again every ``retry`` seconds, so when the
holder's node dies (its claim expires) or shuts down, a standby takes the
bridge over. The new holder is handed the space's ``seq`` at its join
(``on_claimed``): what was addressed to the bridge before it, and not
answered, is in the space's history (:func:`adapters.kit.takeover.answer_unanswered`).

The messages the member receives go to ``handler``; what to register
(capabilities, metadata) is asked of ``registration`` at each claim.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from hub.adapter_host import (
    AdapterMember,
    AgentHosting,
    AgentIdTaken,
    BackplaneUnavailable,
    MessageHandler,
    RequestFailed,
)

log = structlog.get_logger("adapters")

Registration = Callable[[], tuple[tuple[str, ...], dict[str, Any]]]


class AgentIdClaim:
    """The claim on one bridge's agent id (see the module)."""

    def __init__(
        self,
        agent_id: str,
        space: str,
        handler: MessageHandler,
        *,
        type: str,
        registration: Registration,
        on_claimed: Callable[[AdapterMember, int], Awaitable[None]],
        label: str,
    ):
        """``label`` names the bridge kind in the log (``"a2a bridge active"``)."""
        self.agent_id = agent_id
        self.space = space
        self.member: AdapterMember | None = None
        #: Set while this node holds the id.
        self.held = asyncio.Event()
        self._handler = handler
        self._type = type
        self._registration = registration
        self._on_claimed = on_claimed
        self._label = label

    async def keep(self, hosting: AgentHosting, retry: float) -> None:
        """Hold the agent id, or stand by and retry the claim until it is free."""
        while True:
            member = self.member
            if member is None:
                try:
                    claimed = await self.claim(hosting)
                except Exception as exc:  # a standby outlives whatever one try met
                    log.warning(
                        f"{self._label} cannot claim", agent_id=self.agent_id, reason=repr(exc)
                    )
                    claimed = False
                if not claimed:
                    await asyncio.sleep(retry)
                continue
            await member.cleaned_up.wait()  # closed by the hub (replaced elsewhere)
            if self.member is member:
                self.member = None
                self.held.clear()
                log.warning(f"{self._label} lost its agent id", agent_id=self.agent_id)

    async def answer(
        self,
        event: dict[str, Any],
        data: dict[str, Any],
        *,
        failure: Callable[[str], dict[str, Any]] | None = None,
    ) -> None:
        """Publish ``data`` in the space, addressed to ``event``'s sender.

        An answer the hub refuses for what it is (:func:`answer_refused`: nested
        too deep, an integer out of range…) is replaced by ``failure(why)`` when
        given, so the sender hears that its request failed rather than nothing
        (contract §9). An answer that cannot be published at all (the id is not
        held here, the sender left) is logged, never raised."""
        member, sender = self.member, event.get("from")
        if member is None or not isinstance(sender, str):
            log.warning(f"{self._label} answer lost: bridge not held", agent_id=self.agent_id)
            return
        try:
            await member.publish(self.space, data, to=sender)
            return
        except RequestFailed as exc:
            if failure is None or not answer_refused(exc):  # the sender left, say
                self._not_delivered(exc)
                return
            why = str(exc.error.get("message"))
        except TimeoutError as exc:
            self._not_delivered(exc)
            return
        log.warning(
            f"{self._label} answer refused by the hub: a failure goes instead",
            agent_id=self.agent_id, reason=why,
        )  # fmt: skip
        try:
            await member.publish(self.space, failure(why), to=sender)
        except (RequestFailed, TimeoutError) as exc:
            self._not_delivered(exc)

    def _not_delivered(self, exc: Exception) -> None:
        log.info(f"{self._label} answer not delivered", agent_id=self.agent_id, reason=str(exc))

    async def release(self) -> None:
        member, self.member = self.member, None
        self.held.clear()
        if member is not None:
            await member.aclose()

    async def claim(self, hosting: AgentHosting) -> bool:
        """Try to hold the agent id now; False: another node holds it, or
        this one cannot (it stands by)."""
        capabilities, metadata = self._registration()
        try:
            member = await hosting.attach(
                self.agent_id, self._handler, type=self._type,
                capabilities=capabilities, metadata=metadata,
            )  # fmt: skip
        except (AgentIdTaken, BackplaneUnavailable):
            return False
        try:
            joined = await member.join(self.space)
        except Exception as exc:  # whatever it was, the claimed id is let go
            log.warning(f"{self._label} cannot join", agent_id=self.agent_id, reason=str(exc))
            await member.aclose()
            return False
        self.member = member
        self.held.set()
        log.info(f"{self._label} active", agent_id=self.agent_id, space=self.space)
        await self._on_claimed(member, int(joined.get("seq", 0)))
        return True


def answer_refused(exc: RequestFailed) -> bool:
    """Did the hub refuse a bridge's publish for what it carries (``INVALID_REQUEST``:
    nested too deep, an integer beyond 64 bits…), rather than because its
    addressee has left the space? Another publish in its place may go through."""
    return exc.code == "INVALID_REQUEST" and "not members" not in str(exc)
