"""Signed envelopes published into spaces: checked before fan-out.

A publish whose ``data.protocol`` is ``agora/1.0`` or ``agentprotocol/0.1``
is an envelope (:func:`is_envelope`, one dict lookup: ordinary publishes pay
nothing more). :class:`EnvelopeCheck` decides what happens to it:

* signed → verified (shape, timestamp window, signature), then, as the last
  step before it is queued, its id is recorded in the replay cache
  (cluster-wide on Redis). Delivered with top-level ``verified: true`` and
  ``signer``. Any failure refuses the whole publish: nothing is delivered and
  no seq is taken;
* unsigned → its shape is checked and it is delivered ``verified: false``,
  except in a space declared ``require_signed = true``;
* in a ``require_signed`` space, anything that is not a valid signed
  envelope is refused ``UNAUTHORIZED``.

The envelope is never modified (no ``data.from`` fill-in): the signature
covers ``data`` exactly. See ``docs/envelopes.md``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from hub.handlers.seen_ids import SeenIds
from protocol.envelope import (
    DEFAULT_MAX_AGE,
    PROTOCOLS,
    EnvelopeError,
    Verified,
    detect,
    is_signed,
    parse,
    verify,
)
from protocol.errors import ErrorCode, ProtocolError

RequestId = str | int | None


def refusal(exc: EnvelopeError, request_id: RequestId) -> ProtocolError:
    """The ``error`` event for a refused envelope: its hub code, and a message
    that starts ``envelope refused, {reason}: `` (bridges read the reason)."""
    return ProtocolError(exc.code, f"envelope refused, {exc.reason}: {exc.message}", request_id)


class EnvelopeCheck:
    """Verification, replay protection and ``require_signed`` for one node."""

    def __init__(
        self,
        seen_ids: SeenIds,
        *,
        signed_spaces: frozenset[str] = frozenset(),
        max_age: float = DEFAULT_MAX_AGE,
        max_skew: float = 30.0,
        clock: Callable[[], float] = time.time,
    ):
        self.seen_ids = seen_ids
        #: Spaces declared ``require_signed = true``.
        self.signed_spaces = signed_spaces
        self.max_age = max_age
        self.max_skew = max_skew
        self._clock = clock

    def check(
        self, space: str, data: Mapping[str, Any], request_id: RequestId
    ) -> tuple[dict[str, Any], Verified | None]:
        """The event's extra top-level fields, and what was verified (None
        for an unsigned envelope). Raises :class:`ProtocolError`."""
        fmt = detect(data)
        try:
            if fmt is None:
                raise ProtocolError(
                    ErrorCode.UNAUTHORIZED,
                    f"space {space!r} accepts only signed envelopes "
                    f"({', '.join(sorted(PROTOCOLS))})",
                    request_id,
                )
            if not is_signed(data):
                parse(data)  # a malformed envelope is refused even unsigned
                if space in self.signed_spaces:
                    raise ProtocolError(
                        ErrorCode.UNAUTHORIZED,
                        f"space {space!r} accepts only signed envelopes: this one is unsigned",
                        request_id,
                    )
                return {"verified": False}, None
            verified = verify(data, now=self._clock(), max_age=self.max_age, max_skew=self.max_skew)
        except EnvelopeError as exc:
            raise refusal(exc, request_id) from None
        return {"verified": True, "signer": verified.signer}, verified

    async def record(self, verified: Verified, request_id: RequestId) -> None:
        """Remember the envelope's id; a replay is refused ``UNAUTHORIZED``.

        An unreachable or full cache raises
        :class:`~hub.errors.BackplaneUnavailable`: refused, never let through.
        """
        if await self.seen_ids.seen(verified.replay_key, verified.replay_ttl):
            raise refusal(verified.replayed(), request_id)

    async def forget(self, verified: Verified) -> None:
        """Undo :meth:`record` for an envelope whose publish then failed.

        Best effort, never raises: when the cache cannot be reached the id
        stays recorded and the sender must sign the envelope anew."""
        with contextlib.suppress(Exception):
            await self.seen_ids.forget(verified.replay_key)

    async def aclose(self) -> None:
        await self.seen_ids.aclose()
