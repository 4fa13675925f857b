"""Bridges between hub spaces and other agent protocols.

Each adapter is a small object with ``start(host)``/``aclose()`` hosted by the
node (see :mod:`hub.virtual`): it acts in spaces through virtual members, so
order, membership, cluster fan-out and limits hold for it as for any agent.
:func:`from_settings` builds the adapters a node's settings ask for; the
process runner passes them to the node.

Exception tree::

    AdapterError        root of the adapters' exceptions
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hub.settings import Settings
    from hub.virtual import Adapter


class AdapterError(Exception):
    """Root of the adapters' exceptions."""


def from_settings(settings: Settings) -> list[Adapter]:
    """The adapters ``settings`` configure (declared spaces and ``[bridges]``)."""
    from adapters.agora_http import adapters_for as agora_http
    from adapters.envelope import adapters_for as envelope

    return [*envelope(settings), *agora_http(settings)]
