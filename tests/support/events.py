"""Waiting on what a client receives."""

from __future__ import annotations

import asyncio
from typing import Any

from agora_client import Event


async def collect(sub: Any, until: int, timeout: float = 30.0) -> list[Event]:
    """Events from the subscription ``sub`` until one with seq ``until`` (or past it)."""
    got: list[Event] = []
    async with asyncio.timeout(timeout):
        while not got or got[-1].seq < until:
            got.append(await sub.get())
    return got
