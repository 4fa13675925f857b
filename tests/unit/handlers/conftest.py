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
        rig = await HandlerRig(**options).start()
        rigs.append(rig)
        return rig

    yield _make
    for rig in rigs:
        await rig.aclose()


@pytest.fixture
async def rig(make_rig: Any) -> HandlerRig:
    """A rig with default settings."""
    return await make_rig()
