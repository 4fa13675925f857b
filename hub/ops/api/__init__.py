"""For operators: the server API (``/api/*``) and the status page (``/admin``).

:class:`OperatorFaces` is built by the node and mounted on its HTTP port. The
server API is on when ``api_key`` is set, the status page when
``admin_token`` is; with either on, the node also publishes its figures for
the cluster every few seconds (:mod:`hub.ops.api.stats`, read by ``GET
/api/nodes`` and the page). With both off, nothing runs and the routes answer
404. What the two faces do is in :mod:`hub.ops.api.operations`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

from aiohttp import web

from hub import __version__
from hub.cluster.nodestats import NodeStatsStore, create_node_stats
from hub.cluster.presence import AgentClaims, AgentRecord
from hub.config.settings import Settings
from hub.core.authz import SpacePolicy
from hub.core.counters import Counters
from hub.net.proxies import TrustedProxies
from hub.ops.api.operations import Operations, Run
from hub.ops.api.routes import api_app
from hub.ops.api.stats import NodeReadings, NodeStatsReporter
from hub.ops.status.page import StatusPage

__all__ = ["NodeReadings", "OperatorFaces"]


class OperatorFaces:
    def __init__(
        self,
        settings: Settings,
        node_id: str,
        run: Run,
        claims: AgentClaims,
        space_exists: Callable[[str], Awaitable[bool]],
        counters: Counters,
        readings: NodeReadings,
        *,
        disconnect_local: Callable[[str, str], bool],
        disconnect_remote: Callable[[AgentRecord, str], Awaitable[bool]],
        node_stats: NodeStatsStore | None = None,
        policy: SpacePolicy | None = None,
        reserved_ids: Collection[str] = (),
    ):
        s = settings
        api_key = s.api_key.get_secret_value() if s.api_key is not None else None
        admin_token = s.admin_token.get_secret_value() if s.admin_token is not None else None
        self.enabled = api_key is not None or admin_token is not None
        self.reporter: NodeStatsReporter | None = None
        self.operations: Operations | None = None
        if self.enabled:
            store = node_stats or create_node_stats(None)
            self.reporter = NodeStatsReporter(node_id, __version__, counters, readings, store)
            self.operations = Operations(
                s, node_id, run, claims, space_exists, store,
                disconnect_local=disconnect_local, disconnect_remote=disconnect_remote,
                own_figures=self.reporter.live, policy=policy, reserved_ids=reserved_ids,
            )  # fmt: skip
        proxies = TrustedProxies(s.trusted_proxies)
        self._api = api_app(self.operations, api_key, s.max_frame_bytes, proxies)
        self.status_page = StatusPage(self.operations, admin_token, proxies)

    def mount(self, app: web.Application) -> None:
        app.add_subapp("/api", self._api)
        app.add_routes(self.status_page.routes())

    async def start(self) -> None:
        if self.reporter is not None:
            await self.reporter.start()

    async def aclose(self) -> None:
        if self.reporter is not None:
            await self.reporter.aclose()
