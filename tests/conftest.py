"""Shared fixtures: in-process hubs, hub processes, a real redis-server, TCP proxies.

Under CI (``CI=true``) a test that needs redis-server must not be skipped:
the missing binary is an error, and the session fails if any test marked
``redis`` was skipped anyway.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.support.redis_ha import ClusterSetup, SentinelSetup
from tests.support.servers import HubProcess, RedisServer, redis_server_binary, start_hub
from tests.support.tcpproxy import TcpProxy

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
_skipped_redis: list[str] = []


@pytest.fixture
async def hub() -> AsyncIterator[Any]:
    """Factory: ``server = await hub(**settings)``; all are closed afterwards."""
    servers = []

    async def _start(**overrides: Any):
        server = await start_hub(**overrides)  # adapters=[…] hosts adapters
        servers.append(server)
        return server

    yield _start
    for server in servers:
        await server.aclose()


@pytest.fixture
async def clients() -> AsyncIterator[Any]:
    """Factory of SDK clients: ``c = await clients(server_or_url, "alice", **options)``.

    All are closed at teardown — before the hubs they talk to, when the test
    asks for the hub fixtures first.
    """
    from agora_client import Client

    opened: list[Client] = []

    async def _connect(target: Any, agent_id: str, **options: Any) -> Client:
        url = target if isinstance(target, str) else target.url
        client = Client(url, agent_id, **options)
        opened.append(client)
        return await client.connect()

    yield _connect
    await asyncio.gather(*(c.aclose() for c in opened), return_exceptions=True)


@pytest.fixture
def hub_process() -> Iterator[Any]:
    """Factory: ``proc = hub_process(**settings)`` starts ``agora-hub serve``."""
    procs: list[HubProcess] = []

    def _start(**settings: Any) -> HubProcess:
        proc = HubProcess(**settings).start()
        procs.append(proc)
        return proc

    yield _start
    for proc in procs:
        proc.close()


@pytest.fixture
async def proxy() -> AsyncIterator[Any]:
    """``await proxy(target, …)``: a :class:`TcpProxy` in front of the targets
    (ports, or hub processes), closed after the test."""
    made: list[TcpProxy] = []

    async def _start(*targets: Any) -> TcpProxy:
        ports = [t if isinstance(t, int) else t.settings["port"] for t in targets]
        p = await TcpProxy(ports).start()
        made.append(p)
        return p

    yield _start
    for p in made:
        await p.aclose()


@pytest.fixture(scope="session")
def agora_peer() -> Any:
    """The real ``agora-protocol`` 0.2.0 library, run from its own cached venv
    (:mod:`tests.support.agora_peer`); skipped when it cannot be installed,
    a failure under ``CI=true``."""
    from tests.support.agora_peer import require_agora_peer

    return require_agora_peer()


@pytest.fixture(scope="session")
def a2a_peer() -> Any:
    """The real ``a2a-sdk`` 1.3.0 library, client and server, run from its own
    cached venv (:mod:`tests.support.a2a_peer`); skipped when it cannot be
    installed, a failure under ``CI=true``."""
    from tests.support.a2a_peer import VENV, A2aPeer

    return A2aPeer(VENV.require())


def _redis_binary() -> str:
    binary = redis_server_binary()
    if binary is None:
        if IN_CI:
            pytest.fail("redis-server is not installed: CI must run the Redis tests")
        pytest.skip("redis-server is not installed")
    return binary


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A private redis-server on a free port, started for this test."""
    server = RedisServer(_redis_binary()).start()
    yield server
    server.kill()


@pytest.fixture
def redis_factory() -> Iterator[Any]:
    """Factory for several private redis-servers."""
    servers: list[RedisServer] = []

    def _start() -> RedisServer:
        server = RedisServer(_redis_binary()).start()
        servers.append(server)
        return server

    yield _start
    for server in servers:
        server.kill()


def _ha_binary() -> str:
    binary = _redis_binary()
    if shutil.which("redis-cli") is None:
        if IN_CI:
            pytest.fail("redis-cli is not installed: CI must run the Redis tests")
        pytest.skip("redis-cli is not installed")
    return binary


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[SentinelSetup]:
    """A primary, a replica and three sentinels, shared by the tests that
    don't kill its master (each uses its own key prefix)."""
    setup = SentinelSetup(_ha_binary())
    try:
        yield setup.start()
    finally:
        setup.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[ClusterSetup]:
    """A Redis Cluster of three masters with a replica each, shared by the
    tests that don't kill a master (each uses its own key prefix)."""
    setup = ClusterSetup(_ha_binary())
    try:
        yield setup.start()
    finally:
        setup.stop()


@pytest.fixture
def redis_ha_factory() -> Iterator[Any]:
    """``factory("sentinel" | "cluster", start=True)``: a fresh setup of this
    test's own (for tests that kill a master), removed at its end."""
    made: list[Any] = []

    def _start(kind: str, *, start: bool = True) -> Any:
        setup = (SentinelSetup if kind == "sentinel" else ClusterSetup)(_ha_binary())
        made.append(setup)
        return setup.start() if start else setup

    yield _start
    for setup in made:
        setup.stop()


_redis_tests: set[str] = set()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--packaging",
        action="store_true",
        help="also run the tests marked packaging (always run under CI=true)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # By its marker, not its keywords: a folder named like it would count too.
    _redis_tests.update(item.nodeid for item in items if item.get_closest_marker("redis"))
    # The packaging checks build wheels and whole installs (a minute or more
    # each): CI runs them, a developer's `make test` leaves them out unless asked.
    if IN_CI or config.getoption("--packaging"):
        return
    slow = [item for item in items if item.get_closest_marker("packaging")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("packaging")]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and report.nodeid in _redis_tests:
        _skipped_redis.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if IN_CI and _skipped_redis:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nCI: {len(_skipped_redis)} Redis-backed test(s) were skipped: {_skipped_redis}")
