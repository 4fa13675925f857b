"""Handler rigs: a node's handlers around memory stores, members are fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.handlers import HandlerRig


@pytest.fixture
async def make_rig() -> AsyncIterator[Any]:
    """Factory: ``rig = await make_rig(**settings)``; closed after the test."""
    rigs: list[HandlerRig] = []

    async def _make(**options: Any) -> HandlerRig:
        if "settings" not in options:
            # Each change its own event, as the seed has it: these rigs' tests
            # pin those events; test_member_events.py covers coalescing.
            options.setdefault("member_events_interval", 0.0)
        rig = await HandlerRig(**options).start()
        rigs.append(rig)
        return rig

    yield _make
    for rig in rigs:
        await rig.membership.aclose()  # held membership changes: no timer outlives the test
        await rig.aclose()


@pytest.fixture
async def rig(make_rig: Any) -> HandlerRig:
    """A rig with default settings."""
    return await make_rig()
