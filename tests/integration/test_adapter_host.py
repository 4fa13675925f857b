"""The typed host adapters are written against (``hub.adapter_host.AdapterHost``),
exercised by a small adapter like the one in docs/architecture.md: an HTTP
route that publishes as the caller, a system space it provides, and the
callers it authenticates. It keeps only the parts of the host it calls."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from hub.adapter_host import (
    AdapterHost,
    AdapterMember,
    AuthError,
    Caller,
    HttpFaces,
    SystemSpaces,
)
from tests.support.wsclient import WsClient


class ShoutAdapter:
    """``POST /shout/{space}`` publishes the body's text into the space, for
    callers allowed to; every shout is also told in ``mcp.shouts``."""

    system_spaces = ("mcp.shouts",)

    def __init__(self) -> None:
        self.http: HttpFaces | None = None
        self.system: SystemSpaces | None = None
        self.member: AdapterMember | None = None
        self.shut_down = asyncio.Event()

    async def start(self, host: AdapterHost) -> None:
        self.http, self.system = host.http, host.system
        self.member = await host.hosting.attach("shouter", type="example")
        host.http.mount([web.post("/shout/{space}", self._shout)], on_shutdown=self._closing)

    async def aclose(self) -> None:
        if self.member is not None:
            await self.member.aclose()

    async def _closing(self) -> None:
        self.shut_down.set()

    async def _shout(self, request: web.Request) -> web.Response:
        assert self.http is not None and self.system is not None and self.member is not None
        space = request.match_info["space"]
        try:
            caller = await self.http.caller(request)
        except AuthError:
            return web.json_response({"error": "unauthorized"}, status=401)
        if not self.http.policy.may_publish(caller, space):
            return web.json_response({"error": "forbidden"}, status=403)
        await self.member.join(space)
        text = (await request.json())["text"]
        event = await self.member.publish(space, {"text": text, "caller": caller.agent_id})
        await self.system.publish_system("mcp.shouts", {"event": "shout", "space": space})
        url = self.http.public_url(request)
        return web.json_response({"seq": event["seq"], "url": url, "caller": caller.agent_id})


async def _post(url: str, body: Any, **headers: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=headers) as r:
        return r.status, await r.json()


async def test_an_adapter_mounts_routes_publishes_and_provides_a_system_space(hub):
    adapter = ShoutAdapter()
    server = await hub(adapters=[adapter])
    listener = await WsClient.connect(server.url, "listener")
    await listener.request({"type": "space.join", "space": "lab"})
    joined = await listener.request({"type": "space.join", "space": "mcp.shouts"})
    assert joined["type"] == "space.joined"
    status, body = await _post(f"{server.http_url}/shout/lab?agent_id=alice", {"text": "hi"})
    assert status == 200 and body["caller"] == "alice"
    assert body["url"] == server.http_url  # as the client reached it
    event = await listener.wait_for("space.event", space="lab")
    assert event["data"] == {"text": "hi", "caller": "alice", "from": "shouter"}
    told = await listener.wait_for("space.event", space="mcp.shouts")
    assert told["data"]["event"] == "shout" and told["from"] == "@hub"
    # Agents observe the adapter's system space but may not publish there.
    refused = await listener.request({"type": "space.publish", "space": "mcp.shouts", "data": {}})
    assert refused["type"] == "error" and refused["code"] == "UNAUTHORIZED"
    # Without the adapter, the system space does not exist.
    plain = await hub()
    other = await WsClient.connect(plain.url, "other")
    missing = await other.request({"type": "space.join", "space": "mcp.shouts"})
    assert missing["code"] == "SPACE_NOT_FOUND"
    await listener.close()
    await other.close()
    await server.aclose()
    assert adapter.shut_down.is_set()


async def test_callers_are_identified_by_bearer_tokens_with_their_claims(hub, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(
        orjson.dumps({"alice": "a-token", "reader": {"token": "r-token", "publish": ["news"]}})
    )
    server = await hub(adapters=[ShoutAdapter()], auth_mode="tokens", auth_tokens_file=str(tokens))
    url = f"{server.http_url}/shout/lab"
    assert (await _post(url, {"text": "x"}))[0] == 401
    assert (await _post(url, {"text": "x"}, Authorization="Bearer wrong"))[0] == 401
    status, body = await _post(url, {"text": "x"}, Authorization="Bearer a-token")
    assert (status, body["caller"]) == (200, "alice")
    assert (await _post(url, {"text": "x"}, Authorization="Bearer r-token"))[0] == 403
    news = f"{server.http_url}/shout/news"
    assert (await _post(news, {"text": "x"}, Authorization="Bearer r-token"))[0] == 200


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"X-Forwarded-Proto": "https", "X-Forwarded-Host": "hub.example:8443"},
         "https://hub.example:8443"),
        ({"Forwarded": 'for=1.2.3.4;proto=https;host="hub.example"'}, "https://hub.example"),
        ({"X-Forwarded-Host": "bad host/evil"}, None),
    ],
)  # fmt: skip
async def test_the_public_url_believes_only_trusted_proxies(hub, headers, expected):
    trusted = await hub(adapters=[ShoutAdapter()], trusted_proxies=["127.0.0.1"])
    status, body = await _post(f"{trusted.http_url}/shout/lab", {"text": "x"}, **headers)
    assert status == 200 and body["url"] == (expected or trusted.http_url)
    untrusted = await hub(adapters=[ShoutAdapter()])
    status, body = await _post(f"{untrusted.http_url}/shout/lab", {"text": "x"}, **headers)
    assert body["url"] == untrusted.http_url


class _Request:
    """What ``HttpFaces.caller`` reads of a request."""

    def __init__(self, headers: dict[str, str] | None = None, **query: str):
        self.headers = headers or {}
        self.query = query
        self.transport = None


async def test_generated_callers_when_auth_is_off(hub):
    server = await hub(adapters=[adapter := ShoutAdapter()])
    host = adapter.http
    assert host is not None
    # Shares count a caller without credentials by its address, not a name it gives.
    bob = await host.caller(_Request(agent_id="bob"))  # type: ignore[arg-type]
    assert bob == Caller("bob", key="ip:unknown", anonymous=True)
    made = await host.caller(_Request(agent_id="not an id!"), prefix="mcp")  # type: ignore[arg-type]
    assert made.agent_id.startswith("mcp-") and len(made.agent_id) == 20
    assert server.node.host.http.auth_required is False


async def test_a_public_face_takes_anonymous_callers_but_never_a_bad_token(hub, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(orjson.dumps({"alice": "a-token"}))
    server = await hub(adapters=[adapter := ShoutAdapter()], auth_mode="tokens",
                       auth_tokens_file=str(tokens))  # fmt: skip
    host = adapter.http
    assert host is not None
    anonymous = await host.caller(_Request(), public=True)  # type: ignore[arg-type]
    assert (anonymous.agent_id, anonymous.anonymous) == ("anonymous", True)
    for request in (_Request(), _Request({"Authorization": "Bearer wrong"})):
        with pytest.raises(AuthError):
            await host.caller(request)  # type: ignore[arg-type]
    with pytest.raises(AuthError):  # a token that proves nothing is refused, public or not
        await host.caller(_Request({"Authorization": "Bearer wrong"}), public=True)  # type: ignore[arg-type]
    alice = await host.caller(_Request({"Authorization": "Bearer a-token"}))  # type: ignore[arg-type]
    assert alice == Caller("alice", key="alice")
    assert server.node.host.http.auth_required is True
