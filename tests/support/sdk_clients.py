"""Helpers for tests of the Python SDK (``agora_client``) against a real hub."""

from __future__ import annotations

from typing import Any

from agora_client import Client


async def members_of(server: Any, clients: Any, space: str, *names: str) -> list[Client]:
    """SDK clients named ``names`` (from the ``clients`` fixture), each joined to ``space``."""
    out = []
    for name in names:
        c = await clients(server, name)
        await c.join(space)
        out.append(c)
    return out
