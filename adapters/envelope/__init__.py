"""Signed-envelope bridge (contract §9): verification gateway and outbound peers.

* :class:`~adapters.envelope.gateway.EnvelopeGateway` — ``POST /envelope/{space}``,
  ``POST /agentprotocol[/{space}]`` on the HTTP port (setting ``envelope_http``);
* :class:`~adapters.envelope.outbound.EnvelopePeer` — one per
  ``[[bridges.envelope]]``: a remote agent that is a member of a space here.

Envelopes published into spaces are verified by the hub itself
(:mod:`hub.handlers.envelope_check`); these adapters carry them over HTTP. See
``docs/envelopes.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from adapters.config import of_kind
from adapters.envelope.config import EnvelopeBridge

if TYPE_CHECKING:
    from pydantic import BaseModel

    from hub.adapter_host import Adapter, HubSettings

__all__ = ["EnvelopeBridge", "adapters_for"]


def adapters_for(settings: HubSettings, bridges: Mapping[str, list[BaseModel]]) -> list[Adapter]:
    from adapters.envelope.gateway import EnvelopeGateway
    from adapters.envelope.outbound import EnvelopePeer

    found: list[Adapter] = []
    if settings.envelope_http:
        found.append(EnvelopeGateway(settings))
    found.extend(
        EnvelopePeer(bridge, settings) for bridge in of_kind(bridges, "envelope", EnvelopeBridge)
    )
    return found
