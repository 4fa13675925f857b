"""The status page (``/admin``) over HTTP: login, sessions, the state document,
its disconnect button's endpoint, and what it refuses. The page itself runs
in a real browser in test_status_page_browser.py."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from yarl import URL

from hub.ops.api.auth import COOKIE
from tests.support.wsclient import WsClient

TOKEN = "admin-token-0123456789"
WAIT = 15.0


async def request(
    server: Any,
    method: str,
    path: str,
    *,
    session: aiohttp.ClientSession,
    **kwargs: Any,
) -> tuple[int, Any, Any]:
    async with session.request(
        method, server.http_url + path, allow_redirects=False, **kwargs
    ) as r:
        body = await r.json() if r.content_type == "application/json" else await r.text()
        return r.status, body, r.headers


async def logged_in(server: Any) -> aiohttp.ClientSession:
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    status, _, headers = await request(
        server, "POST", "/admin/login", session=session, data={"token": TOKEN}
    )
    assert status == 303 and headers["Location"] == "/admin"
    return session


async def test_without_a_token_the_page_is_off(hub):
    server = await hub()
    async with aiohttp.ClientSession() as s:
        for path in ("/admin", "/admin/state", "/admin/static/admin.js"):
            status, body, _ = await request(server, "GET", path, session=s)
            assert status == 404 and "admin_token" in body, path


async def test_login_sets_a_strict_httponly_cookie(hub):
    server = await hub(admin_token=TOKEN)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
        status, page, headers = await request(server, "GET", "/admin", session=s)
        assert status == 200 and 'name="token"' in page  # the login form
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        status, page, _ = await request(
            server, "POST", "/admin/login", session=s, data={"token": "wrong-token-000000"}
        )
        assert status == 401 and "not right" in page
        status, _, headers = await request(
            server, "POST", "/admin/login", session=s, data={"token": TOKEN}
        )
        assert status == 303
        cookie = headers["Set-Cookie"]
        for attribute in ("HttpOnly", "SameSite=Strict", "Path=/admin", "Max-Age="):
            assert attribute in cookie, cookie
        assert "Secure" not in cookie  # plain HTTP here
        assert TOKEN not in cookie
        status, page, _ = await request(server, "GET", "/admin", session=s)
        assert status == 200 and 'id="spaces"' in page and "admin.js" in page
        status, state, _ = await request(server, "GET", "/admin/state", session=s)
        assert status == 200 and state["node"] == server.node.node_id
        status, _, headers = await request(server, "POST", "/admin/logout", session=s)
        assert status == 303 and f"{COOKIE}=" in headers["Set-Cookie"]
        s.cookie_jar.clear()
        status, body, _ = await request(server, "GET", "/admin/state", session=s)
        assert status == 401 and body["error"]["code"] == "UNAUTHENTICATED"


async def test_bearer_token_and_forged_cookies(hub):
    server = await hub(admin_token=TOKEN)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        status, _, _ = await request(server, "GET", "/admin/state", session=s, headers=bearer)
        assert status == 200
        wrong = {"Authorization": "Bearer not-the-token-0000"}
        status, _, _ = await request(server, "GET", "/admin/state", session=s, headers=wrong)
        assert status == 401
        far_future = str(int(time.time()) + 10**6)
        for forged in (f"{far_future}.{'0' * 64}", "garbage", f"{far_future}.", ""):
            s.cookie_jar.update_cookies({COOKIE: forged}, URL(server.http_url + "/admin"))
            status, _, _ = await request(server, "GET", "/admin/state", session=s)
            assert status == 401, forged


async def test_state_shows_nodes_spaces_rates_and_agents(hub, clients):
    server = await hub(admin_token=TOKEN)
    worker = await clients(server, "worker-1", agent_type="tool", capabilities=["urn:img:resize"])
    await worker.join("busy")
    session = await logged_in(server)
    try:
        deadline = time.monotonic() + WAIT
        while True:
            for i in range(5):
                await worker.publish("busy", {"n": i})
            status, state, _ = await request(server, "GET", "/admin/state", session=session)
            assert status == 200
            spaces = {s["id"]: s for s in state["spaces"]}
            if state["nodes"] and spaces["busy"]["events_per_s"] > 0:
                break
            assert time.monotonic() < deadline, state
            await asyncio.sleep(0.3)
        assert spaces["busy"]["member_count"] == 1 and spaces["busy"]["type"] == "public"
        assert state["spaces_total"] == len(state["spaces"])
        (node,) = state["nodes"]
        assert node["id"] == server.node.node_id and node["connections"] == 1
        (agent,) = state["agents"]
        assert agent["id"] == "worker-1" and agent["capabilities"] == ["urn:img:resize"]
        assert agent["node"] == server.node.node_id and agent["connected_at"]
        status, state, _ = await request(
            server, "GET", "/admin/state?capability=nothing:*", session=session
        )
        assert status == 200 and state["agents"] == []
        status, body, _ = await request(
            server, "GET", "/admin/state?space=Bad%20Name", session=session
        )
        assert status == 400 and body["error"]["code"] == "INVALID_REQUEST"
    finally:
        await session.close()


async def test_disconnect_from_the_page_and_what_it_refuses(hub):
    server = await hub(admin_token=TOKEN)
    victim = await WsClient.connect(server.url, "victim")
    session = await logged_in(server)
    path = "/admin/agents/victim/disconnect"
    try:
        # What a page of another site could make the browser send.
        status, body, _ = await request(server, "POST", path, session=session, data={"reason": "x"})
        assert status == 400 and "application/json" in body["error"]["message"]
        status, body, _ = await request(
            server,
            "POST",
            path,
            session=session,
            json={},
            headers={"Origin": "https://evil.example"},
        )
        assert status == 403
        async with aiohttp.ClientSession() as anonymous:
            status, _, _ = await request(server, "POST", path, session=anonymous, json={})
            assert status == 401
        status, body, _ = await request(
            server,
            "POST",
            path,
            session=session,
            json={"reason": "from the page"},
            headers={"Origin": server.http_url},
        )
        assert status == 200 and body["agent"] == "victim"
        code, frames = await victim.closed()
        assert code == 4403 and "from the page" in frames[-1]["message"]
    finally:
        await session.close()


async def test_disconnect_from_the_page_behind_a_balancer_that_drops_the_port(hub):
    """nginx's ``Host $host`` drops the port the browser used (the compose demo's
    8080); the page's ``Origin`` has it. From a trusted balancer the origin it
    names (``X-Forwarded-Host``) is the page's own — found by an outside audit:
    the button was refused 403 behind the shipped nginx. Not believed from
    anyone else."""
    behind = {
        "Host": "hub.example",
        "X-Forwarded-Host": "hub.example:8080",
        "X-Forwarded-Proto": "http",
        "Origin": "http://hub.example:8080",
    }
    for trusted, want in ((["127.0.0.1"], 200), ([], 403)):
        server = await hub(admin_token=TOKEN, trusted_proxies=trusted)
        victim = await WsClient.connect(server.url, "victim")
        session = await logged_in(server)
        try:
            status, _, _ = await request(
                server, "POST", "/admin/agents/victim/disconnect",
                session=session, json={}, headers=behind,
            )  # fmt: skip
            assert status == want, (trusted, status)
        finally:
            await session.close()
            await victim.close()


#: What a browser sends with a form another site's page posts: its origin, or
#: ``null`` from a sandboxed frame, and (every current browser) Sec-Fetch-Site.
CROSS_SITE = [
    {"Origin": "https://evil.example"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
    {"Sec-Fetch-Site": "same-site", "Origin": "http://other.127.0.0.1.example"},
]


async def test_logout_from_another_site_is_refused(hub):
    """Found by an outside audit: ``POST /admin/logout`` took a cross-site form
    post, so any page could log the operator out. It is refused as the
    disconnect is, and the session goes on; the page's own logout works —
    with a real ``Origin``, or ``Origin: null`` when the browser says
    ``Sec-Fetch-Site: same-origin`` (what a page under ``Referrer-Policy:
    no-referrer`` sends)."""
    server = await hub(admin_token=TOKEN)
    session = await logged_in(server)
    try:
        for headers in CROSS_SITE:
            status, body, sent = await request(
                server, "POST", "/admin/logout", session=session, headers=headers
            )
            assert status == 403, (headers, status)
            assert body["error"]["code"] == "UNAUTHORIZED" and "Set-Cookie" not in sent
            status, _, _ = await request(server, "GET", "/admin/state", session=session)
            assert status == 200, headers  # still logged in
        for headers in (
            {"Origin": server.http_url},
            {"Origin": server.http_url, "Sec-Fetch-Site": "same-origin"},
            {"Origin": "null", "Sec-Fetch-Site": "same-origin"},
            {},  # not a browser's
        ):
            status, _, sent = await request(
                server, "POST", "/admin/logout", session=session, headers=headers
            )
            assert status == 303 and f"{COOKIE}=" in sent["Set-Cookie"], headers
    finally:
        await session.close()


async def test_login_from_another_site_is_refused(hub):
    """A login form posted by another site's page is refused (403) before the
    token is looked at — even the right one sets no cookie — and counts
    nothing against the operator's address (it could otherwise use up its
    tries: test_operator_throttle.py)."""
    server = await hub(admin_token=TOKEN)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
        for headers in CROSS_SITE * 3:  # more than the throttle's limit
            for token in (TOKEN, "wrong-token-000000"):
                status, page, sent = await request(
                    server, "POST", "/admin/login", session=s, data={"token": token},
                    headers=headers,
                )  # fmt: skip
                assert status == 403 and "status page itself" in page, (headers, status)
                assert "Set-Cookie" not in sent
        status, _, _ = await request(
            server, "POST", "/admin/login", session=s, data={"token": TOKEN},
            headers={"Origin": server.http_url, "Sec-Fetch-Site": "same-origin"},
        )  # fmt: skip
        assert status == 303
        status, _, _ = await request(server, "GET", "/admin/state", session=s)
        assert status == 200


async def test_static_files_and_unknown_paths(hub):
    server = await hub(admin_token=TOKEN)
    async with aiohttp.ClientSession() as s:
        status, script, headers = await request(server, "GET", "/admin/static/admin.js", session=s)
        assert status == 200 and headers["Content-Type"].startswith("text/javascript")
        assert "fetch(" in script
        status, _, _ = await request(server, "GET", "/admin/static/../settings.py", session=s)
        assert status == 404
        status, _, _ = await request(server, "GET", "/admin/static/index.html", session=s)
        assert status == 404
        status, _, headers = await request(server, "GET", "/admin/", session=s)
        assert status == 301 and headers["Location"] == "/admin"


@pytest.mark.parametrize("name", ["index.html", "login.html", "admin.css", "admin.js"])
def test_the_page_loads_nothing_from_elsewhere(name):
    from importlib.resources import files

    text = (files("hub.ops.status") / "static" / name).read_text()
    for marker in ("http://", "https://", "cdn", "googleapis", "@import"):
        assert marker not in text, (name, marker)
