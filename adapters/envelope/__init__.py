"""Signed-envelope bridge (contract §9): verification gateway and outbound peers.

* :class:`~adapters.envelope.gateway.EnvelopeGateway` — ``POST /envelope/{space}``,
  ``POST /agentprotocol[/{space}]`` on the HTTP port (setting ``envelope_http``);
* :class:`~adapters.envelope.outbound.EnvelopePeer` — one per
  ``[[bridges.envelope]]``: a remote agent that is a member of a space here.

Envelopes published into spaces are verified by the hub itself
(:mod:`hub.envelopes`); these adapters carry them over HTTP. See
``docs/envelopes.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hub.settings import Settings
    from hub.virtual import Adapter


def adapters_for(settings: Settings) -> list[Adapter]:
    from adapters.envelope.gateway import EnvelopeGateway
    from adapters.envelope.outbound import EnvelopePeer

    found: list[Adapter] = []
    if settings.envelope_http:
        found.append(EnvelopeGateway(settings))
    found.extend(EnvelopePeer(bridge, settings) for bridge in settings.bridges.envelope)
    return found
