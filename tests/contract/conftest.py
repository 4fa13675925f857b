"""Every contract runs its bodies once per implementation: memory and Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.stores import Connections

REDIS_MODES = {"redis": "redis_server", "sentinel": "redis_sentinel", "cluster": "redis_cluster"}
BACKENDS = ["memory", *(pytest.param(mode, marks=pytest.mark.redis) for mode in REDIS_MODES)]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Any:
    """None for memory; for Redis something with the ``url`` of the mode: a
    private redis-server, the shared Sentinel setup, the shared Redis Cluster."""
    if request.param == "memory":
        return None
    return request.getfixturevalue(REDIS_MODES[request.param])


@pytest.fixture
async def connect() -> AsyncIterator[Connections]:
    """``connect(url, **options)``: a RedisConnection closed when the test ends."""
    connections = Connections()
    yield connections
    await connections.aclose()
