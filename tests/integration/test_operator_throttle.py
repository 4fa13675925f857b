"""Wrong operator secrets are throttled per client address (found by an
outside audit: ``/admin/login``, a bearer on ``/admin/*`` and the API key on
``/api/*`` answered every guess at once). Past ``MAX_FAILURES`` wrong
secrets from one address in a window, that address gets 429 with
``Retry-After`` until the window ends, the right secret included; other
addresses are unaffected. The state is bounded (hub/ops/api/throttle.py)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from hub.ops.api.throttle import MAX_FAILURES, WINDOW_SECONDS, FailureThrottle, Throttled

API_KEY = "throttle-api-key-0123456789"
TOKEN = "throttle-admin-token-0123456789"
#: The hub believes the test's X-Forwarded-For (its peer is 127.0.0.1).
BEHIND = {"trusted_proxies": ["127.0.0.1"]}


async def send(
    server: Any,
    method: str,
    path: str,
    address: str | None,
    *,
    headers: dict[str, str] | None = None,
    session: aiohttp.ClientSession | None = None,
    **kwargs: Any,
) -> tuple[int, Any, Any]:
    """One request from ``address`` (X-Forwarded-For; None: none)."""
    sent = dict(headers or {})
    if address is not None:
        sent["X-Forwarded-For"] = address
    own = session is None
    http = session or aiohttp.ClientSession()
    try:
        async with http.request(
            method, server.http_url + path, headers=sent, allow_redirects=False, **kwargs
        ) as r:
            body = await r.json() if r.content_type == "application/json" else await r.text()
            return r.status, body, r.headers
    finally:
        if own:
            await http.close()


def retry_after(headers: Any) -> int:
    value = int(headers["Retry-After"])
    assert 1 <= value <= WINDOW_SECONDS, value
    return value


# ── the server API ──────────────────────────────────────────────────────────


async def test_wrong_api_keys_are_throttled_per_address(hub):
    server = await hub(api_key=API_KEY, **BEHIND)
    guesser, neighbour = "203.0.113.7", "203.0.113.8"
    for n in range(MAX_FAILURES):
        key = {"X-API-Key": f"guess-{n:04d}-0123456789"}
        status, body, _ = await send(server, "GET", "/api/spaces", guesser, headers=key)
        assert status == 401 and body["error"]["code"] == "UNAUTHENTICATED", n
    status, body, headers = await send(
        server, "GET", "/api/spaces", guesser, headers={"X-API-Key": "one-more-guess-0123"}
    )
    assert status == 429 and body["error"]["code"] == "RATE_LIMITED", body
    retry_after(headers)
    # The right key from that address is not even looked at, in either header.
    for right in ({"X-API-Key": API_KEY}, {"Authorization": f"apikey {API_KEY}"}):
        status, body, headers = await send(server, "GET", "/api/spaces", guesser, headers=right)
        assert status == 429 and body["error"]["code"] == "RATE_LIMITED"
        retry_after(headers)
    # Another address is unaffected: its right key works, its wrong one is 401.
    right = {"X-API-Key": API_KEY}
    status, body, _ = await send(server, "GET", "/api/spaces", neighbour, headers=right)
    assert status == 200 and "spaces" in body
    status, _, _ = await send(
        server, "GET", "/api/spaces", neighbour, headers={"X-API-Key": "nope"}
    )
    assert status == 401


async def test_requests_without_a_key_are_no_guesses(hub):
    """A request with no API key (or an agent's bearer token, which is no
    API key) is 401 and guesses nothing: it does not count."""
    server = await hub(api_key=API_KEY, **BEHIND)
    for n in range(3 * MAX_FAILURES):
        headers = {"Authorization": "Bearer some-agent-token"} if n % 2 else {}
        status, _, _ = await send(server, "GET", "/api/spaces", "198.51.100.1", headers=headers)
        assert status == 401, n
    status, _, _ = await send(
        server, "GET", "/api/spaces", "198.51.100.1", headers={"X-API-Key": API_KEY}
    )
    assert status == 200


async def test_a_forwarded_address_from_anyone_but_a_trusted_proxy_is_not_believed(hub):
    """Without trusted_proxies, X-Forwarded-For is the client's own word: every
    guess counts against the TCP peer, whatever address it names."""
    server = await hub(api_key=API_KEY)
    for n in range(MAX_FAILURES):
        status, _, _ = await send(
            server, "GET", "/api/spaces", f"192.0.2.{n + 1}", headers={"X-API-Key": "wrong"}
        )
        assert status == 401, n
    status, _, headers = await send(
        server, "GET", "/api/spaces", "192.0.2.200", headers={"X-API-Key": API_KEY}
    )
    assert status == 429
    retry_after(headers)


# ── the status page ─────────────────────────────────────────────────────────


async def test_wrong_admin_tokens_are_throttled_per_address(hub):
    server = await hub(admin_token=TOKEN, **BEHIND)
    guesser, neighbour = "203.0.113.9", "2001:db8:1::5"
    # An operator behind the same address, logged in before the guessing.
    operator = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    try:
        status, _, _ = await send(
            server, "POST", "/admin/login", guesser, session=operator, data={"token": TOKEN}
        )
        assert status == 303
        # The login form's and a bearer's wrong tokens count together.
        for n in range(MAX_FAILURES):
            if n % 2:
                status, _, _ = await send(
                    server, "GET", "/admin/state", guesser,
                    headers={"Authorization": f"Bearer guess-{n:04d}-0123456789"},
                )  # fmt: skip
            else:
                status, page, _ = await send(
                    server, "POST", "/admin/login", guesser,
                    data={"token": f"guess-{n:04d}-0123456789"},
                )  # fmt: skip
                assert "not right" in page
            assert status == 401, n
        # Past the limit: 429 with Retry-After, the right token included.
        status, page, headers = await send(
            server, "POST", "/admin/login", guesser, data={"token": TOKEN}
        )
        assert status == 429 and "try again in" in page
        assert "Set-Cookie" not in headers
        retry_after(headers)
        status, body, headers = await send(
            server, "GET", "/admin/state", guesser, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert status == 429 and body["error"]["code"] == "RATE_LIMITED"
        retry_after(headers)
        # A bearer's request is a script's: JSON on the page's path too (api.md).
        status, body, headers = await send(
            server, "GET", "/admin", guesser, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert status == 429 and body["error"]["code"] == "RATE_LIMITED", body
        retry_after(headers)
        # A session cookie is no guess at the token: the operator goes on.
        status, body, _ = await send(server, "GET", "/admin/state", guesser, session=operator)
        assert status == 200 and body["node"] == server.node.node_id
        # Another address is unaffected.
        status, _, _ = await send(
            server, "POST", "/admin/login", neighbour, data={"token": "wrong-token-0000000"}
        )
        assert status == 401
        status, _, _ = await send(server, "POST", "/admin/login", neighbour, data={"token": TOKEN})
        assert status == 303
    finally:
        await operator.close()


# ── the throttle itself ─────────────────────────────────────────────────────


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_limit_holds_until_the_window_ends():
    clock = Clock()
    throttle = FailureThrottle(limit=3, window=60, clock=clock)
    for _ in range(3):
        throttle.check("192.0.2.1")
        throttle.failed("192.0.2.1")
        clock.now += 5
    with pytest.raises(Throttled) as refused:
        throttle.check("192.0.2.1")
    assert refused.value.retry_after == 45  # the window opened with the first failure
    throttle.check("192.0.2.2")  # another address
    clock.now += 44.5
    with pytest.raises(Throttled) as refused:
        throttle.check("192.0.2.1")
    assert refused.value.retry_after == 1
    clock.now += 0.5
    throttle.check("192.0.2.1")  # the window is over
    assert len(throttle) == 0
    throttle.failed("192.0.2.1")  # a new window, counted from one
    throttle.failed("192.0.2.1")
    throttle.check("192.0.2.1")


def test_an_ipv6_client_counts_as_its_64():
    throttle = FailureThrottle(limit=3, window=60, clock=Clock())
    for n in range(3):
        throttle.failed(f"2001:db8:0:7::{n + 1:x}")
    with pytest.raises(Throttled):
        throttle.check("2001:db8:0:7:ffff:ffff:ffff:ffff")
    throttle.check("2001:db8:0:8::1")
    assert len(throttle) == 1


def test_the_state_is_bounded():
    """A spray of addresses cannot grow it: beyond ``capacity`` the address
    that failed longest ago is forgotten, and expired windows are dropped."""
    clock = Clock()
    throttle = FailureThrottle(limit=2, window=60, capacity=100, clock=clock)
    for n in range(50_000):
        throttle.failed(f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}")
        assert len(throttle) <= 100
    assert len(throttle) == 100
    throttle.failed("10.0.195.79")  # the last one sprayed (n = 49999), a second time
    with pytest.raises(Throttled):
        throttle.check("10.0.195.79")
    clock.now += 60
    throttle.failed("192.0.2.1")  # every other window is over
    assert len(throttle) == 1
    # The hub's own bound, with its own defaults.
    throttle = FailureThrottle()
    for n in range(throttle.capacity + 5000):
        throttle.failed(f"2001:db8:{n >> 16 & 0xFFFF:x}:{n & 0xFFFF:x}::1")
    assert len(throttle) == throttle.capacity
