"""Bridges between hub spaces and other agent protocols.

Each adapter is a small object with ``start(host)``/``aclose()`` hosted by the
node (:class:`hub.adapter_host.AdapterHost`, a bundle of small protocols;
each part of an adapter is handed only the ones it calls): it acts in spaces
through virtual members, so order, membership, cluster fan-out and limits
hold for it as for any agent. Adapters import :mod:`hub.adapter_host`, :mod:`protocol`
and their own package only. :func:`from_settings` builds the adapters a
node's settings ask for (each package checks its own ``[[bridges.*]]``
tables, :mod:`adapters.config`); the process runner passes them to the node.

Exception tree::

    AdapterError        root of the adapters' exceptions
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hub.adapter_host import Adapter, HubSettings


class AdapterError(Exception):
    """Root of the adapters' exceptions."""


def from_settings(settings: HubSettings) -> list[Adapter]:
    """The adapters ``settings`` configure (declared spaces and ``[bridges]``).
    Raises :class:`~hub.adapter_host.ConfigError` for a mistake in either."""
    from adapters import a2a, agora_http, envelope, mcp
    from adapters.config import parse_bridges

    bridges = parse_bridges(
        settings.bridges,
        {
            "agora_http": agora_http.AgoraHttpBridge,
            "envelope": envelope.EnvelopeBridge,
            "a2a": a2a.A2aBridge,
        },
    )
    return [
        *envelope.adapters_for(settings, bridges),
        *agora_http.adapters_for(settings, bridges),
        *a2a.adapters_for(settings, bridges),
        *mcp.adapters_for(settings),
    ]
