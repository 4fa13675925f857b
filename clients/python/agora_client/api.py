"""``HubAPI``: the hub's server API over HTTP, for backends (docs/api.md).

::

    from agora_client import HubAPI

    async with HubAPI("http://127.0.0.1:8766", api_key) as api:
        event = await api.publish("general", {"text": "deploy finished"})
        for agent in await api.find_agents(capability="urn:img:*"):
            print(agent.id, agent.node)
        await api.disconnect("spammer", reason="abuse")

``url`` is the hub's HTTP port (``http_port``), or the load balancer in front
of it. An ``https://`` hub with a private CA needs ``ca_file`` (or an
``ssl`` context; ``SSL_CERT_FILE`` is honoured by default). Every refusal
raises the SDK's :class:`~agora_client.errors.HubRejected` subclass for its code
(``SpaceNotFound``, ``InvalidRequest``, ``RateLimited`` …, or a plain
``HubRejected`` for the API's own codes such as ``UNAUTHENTICATED`` and
``AGENT_NOT_FOUND``) with the HTTP status in ``status``; a hub that cannot be
reached raises :class:`~agora_client.errors.ConnectionFailed`.

It needs aiohttp, the ``api`` extra (``pip install 'agora-hub-client[api]'``);
``import agora_client`` does not load it, only the first use of ``HubAPI``.
"""

from __future__ import annotations

import ssl as ssl_module
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

try:
    import aiohttp
except ImportError as exc:  # an optional extra: the WebSocket client does without it
    raise ImportError(
        "HubAPI needs aiohttp: install the client with its api extra, "
        "pip install 'agora-hub-client[api]'"
    ) from exc

from agora_client._version import __version__
from agora_client.errors import ConnectionFailed, HubRejected, RequestTimeout, rejected
from agora_client.models import AgentEntry, AgentPage, MembersPage, SpaceInfo
from agora_client.requests import every_page


@dataclass(frozen=True, slots=True)
class Published:
    """What ``POST /api/publish`` answers: the event's stamps."""

    space: str
    event_id: str
    seq: int
    timestamp: int
    sender: str


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node of the cluster, as it last reported itself (every ~2 s)."""

    id: str
    version: str
    connections: int
    spaces: int
    deliveries_per_s: float
    messages_in_per_s: float
    published_per_s: float
    backplane_lag: float
    backplane_ready: bool
    started_at: int
    updated_at: int


class HubAPI:
    """An async client of the server API; one connection pool, closed by ``close``."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = 10.0,
        ca_file: str | Path | None = None,
        ssl: ssl_module.SSLContext | None = None,
    ):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be the hub's http:// or https:// URL, not {url!r}")
        self.url = url.rstrip("/")
        self._headers = {
            "Authorization": f"apikey {api_key}",
            "User-Agent": f"agora-hub-client/{__version__}",
        }
        if ssl is None and ca_file is not None:
            ssl = ssl_module.create_default_context(cafile=str(ca_file))
        self._ssl = ssl
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> HubAPI:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection pool. Idempotent."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def aclose(self) -> None:
        """The same as :meth:`close` (the name ``contextlib.aclosing`` calls)."""
        await self.close()

    # ── the routes ──────────────────────────────────────────────────────

    async def publish(
        self,
        space: str,
        data: dict[str, Any],
        *,
        to: str | list[str] | None = None,
        service: str | None = None,
    ) -> Published:
        """Publish ``data`` into ``space`` (from ``api``, or ``service``)."""
        body: dict[str, Any] = {"space": space, "data": data}
        if to is not None:
            body["to"] = to
        if service is not None:
            body["service"] = service
        r = await self._call("POST", "/api/publish", body)
        return Published(r["space"], r["event_id"], r["seq"], r["timestamp"], r["from"])

    async def spaces(self) -> list[SpaceInfo]:
        r = await self._call("GET", "/api/spaces")
        return [SpaceInfo(s["id"], s["type"], s["member_count"]) for s in r["spaces"]]

    async def members(
        self, space: str, *, cursor: str | None = None, limit: int | None = None
    ) -> MembersPage:
        """One page of ``space``'s members, oldest first."""
        params = _params(cursor=cursor, limit=limit)
        r = await self._call("GET", f"/api/spaces/{quote(space, safe='')}/members", params=params)
        return MembersPage(r["space"], r["members"], r["member_count"], r["next_cursor"])

    async def all_members(self, space: str, *, page_size: int = 1000) -> list[str]:
        return await every_page(
            lambda cursor: self.members(space, cursor=cursor, limit=page_size),
            lambda page: page.members,
        )

    async def agents(
        self,
        *,
        capability: str | None = None,
        space: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> AgentPage:
        """One page of the agent directory (filters as ``agent.list``)."""
        params = _params(capability=capability, space=space, cursor=cursor, limit=limit)
        r = await self._call("GET", "/api/agents", params=params)
        return AgentPage([_agent(a) for a in r["agents"]], r["next_cursor"])

    async def find_agents(
        self, *, capability: str | None = None, space: str | None = None
    ) -> list[AgentEntry]:
        """Every agent online matching the filters (all pages)."""
        return await every_page(
            lambda cursor: self.agents(
                capability=capability, space=space, cursor=cursor, limit=1000
            ),
            lambda page: page.agents,
        )

    async def disconnect(self, agent_id: str, *, reason: str | None = None) -> dict[str, Any]:
        """Close ``agent_id``'s connection, on whichever node (close 4403)."""
        body = {} if reason is None else {"reason": reason}
        return await self._call("POST", f"/api/agents/{quote(agent_id, safe='')}/disconnect", body)

    async def nodes(self) -> list[NodeInfo]:
        r = await self._call("GET", "/api/nodes")
        fields = NodeInfo.__dataclass_fields__
        return [NodeInfo(**{k: n.get(k) for k in fields}) for n in r["nodes"]]

    # ── one request ─────────────────────────────────────────────────────

    async def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
        data = orjson.dumps(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else None
        url = self.url + path
        try:
            async with self._session.request(
                method, url, data=data, params=params, headers=headers, ssl=self._ssl or True
            ) as response:
                raw = await response.read()
                status = response.status
        except TimeoutError:
            raise RequestTimeout(f"{method} {path}: no answer from {self.url}") from None
        except aiohttp.ClientError as exc:
            raise ConnectionFailed(f"cannot reach {self.url}: {exc}") from None
        try:
            answer = orjson.loads(raw)
        except orjson.JSONDecodeError:
            answer = None
        if 200 <= status < 300 and answer is not None:
            return answer
        error = answer.get("error") if isinstance(answer, dict) else None
        if not isinstance(error, dict):
            text = raw[:200].decode(errors="replace").strip()
            error = {"code": f"HTTP_{status}", "message": text or f"HTTP {status}"}
        exc = rejected(error)
        exc.status = status
        raise exc


def _params(**values: Any) -> dict[str, str]:
    return {k: str(v) for k, v in values.items() if v is not None}


def _agent(a: dict[str, Any]) -> AgentEntry:
    return AgentEntry(
        a["id"], a.get("type"), list(a.get("capabilities") or []), dict(a.get("metadata") or {}),
        a.get("node", ""), a.get("connected_at"),
    )  # fmt: skip


__all__ = ["HubAPI", "HubRejected", "NodeInfo", "Published"]
