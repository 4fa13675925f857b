"""Every contract runs its bodies once per implementation: memory and Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.stores import Connections


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def backend(request: pytest.FixtureRequest) -> Any:
    """None for memory; the private redis-server for Redis."""
    if request.param == "memory":
        return None
    return request.getfixturevalue("redis_server")


@pytest.fixture
async def connect() -> AsyncIterator[Connections]:
    """``connect(url, **options)``: a RedisConnection closed when the test ends."""
    connections = Connections()
    yield connections
    await connections.aclose()
