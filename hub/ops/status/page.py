"""The live status page at ``/admin`` on the HTTP port (docs/api.md).

Off unless ``admin_token`` is set (every ``/admin`` path is then 404). A
browser logs in with the token through a form and gets a session cookie
(:mod:`hub.ops.api.auth`); scripts may send ``Authorization: Bearer TOKEN``
instead. The page is static HTML, CSS and one small script shipped in the
package (``hub/ops/status/static/``): no build step, nothing from elsewhere (it works
offline, and its Content-Security-Policy allows only this origin). The script
polls ``GET /admin/state`` every two seconds — the nodes, spaces and agents of
the whole cluster — and its disconnect buttons call ``POST
/admin/agents/{id}/disconnect``, which does what the server API's does.

A state-changing request must come from the page itself: the cookie is
``SameSite=Strict``, every POST (login and logout forms included) is refused
when the browser says it comes from another site (``Sec-Fetch-Site``, else a
foreign ``Origin``: :func:`_same_origin`), and a disconnect must be JSON
(which a cross-site form cannot send). Wrong admin tokens (the login form's,
a wrong ``Authorization: Bearer``) are throttled per client address
(:mod:`hub.ops.api.throttle`).
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from aiohttp import web

from hub.errors import BackplaneUnavailable
from hub.net.bodies import BodyRefused, parse_json, read_body
from hub.net.proxies import TrustedProxies
from hub.ops.api.auth import COOKIE, AdminSessions, Secret, bearer_of
from hub.ops.api.errors import ApiError, json_response
from hub.ops.api.operations import Operations
from hub.ops.api.throttle import FailureThrottle, Throttled, client_of
from protocol import codec
from protocol.errors import ErrorCode

#: Spaces and agents one state document shows at most (the busiest spaces,
#: the first agents by id; the page says when there are more).
MAX_SPACES = 500
MAX_AGENTS = 500
#: Largest body of a disconnect request (``{"reason": …}``).
MAX_BODY = 65536
STATIC = {"admin.js": "text/javascript", "admin.css": "text/css"}
HTML_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Not "no-referrer": under it a browser sends "Origin: null" with the
    # page's own form posts; "same-origin" still tells other sites nothing.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_LOGIN_MESSAGE = "<!--message-->"


def _asset(name: str) -> str:
    return (files("hub.ops.status") / "static" / name).read_text(encoding="utf-8")


class StatusPage:
    def __init__(
        self,
        operations: Operations | None,
        admin_token: str | None,
        proxies: TrustedProxies | None = None,
    ):
        self.ops = operations
        #: Behind ``trusted_proxies``: the origin the browser reached (their
        #: ``X-Forwarded-Proto`` / ``-Host``), which a page's ``Origin`` names.
        self._proxies = proxies if proxies is not None else TrustedProxies()
        self.sessions = AdminSessions(Secret(admin_token)) if admin_token is not None else None
        #: Wrong admin tokens per client address, the login form's and bearers'.
        self.throttle = FailureThrottle()
        if self.sessions is not None:
            self._page = _asset("index.html")
            self._login = _asset("login.html")
            self._static = {name: _asset(name) for name in STATIC}

    def routes(self) -> list[web.RouteDef]:
        if self.sessions is None or self.ops is None:
            return [web.route("*", "/admin", _off), web.route("*", "/admin/{tail:.*}", _off)]
        return [
            web.get("/admin", self.page),
            web.get("/admin/", _to_page),
            web.post("/admin/login", self.login),
            web.post("/admin/logout", self.logout),
            web.get("/admin/state", self.state),
            web.post("/admin/agents/{agent_id}/disconnect", self.disconnect),
            web.get("/admin/static/{name}", self.static),
        ]

    # ── pages ───────────────────────────────────────────────────────────

    async def page(self, request: web.Request) -> web.Response:
        try:
            if self._authenticated(request):
                return _html(self._page)
        except Throttled as exc:
            if bearer_of(request) is not None:  # a script's request: JSON, as the API's
                return exc.error().response()
            return self._login_page(str(exc), 429, exc.headers())
        return _html(self._login.replace(_LOGIN_MESSAGE, ""))

    async def login(self, request: web.Request) -> web.Response:
        assert self.sessions is not None
        try:
            # A login posted by another site's page is refused, not counted:
            # nobody else can make the operator's browser guess (or use up
            # its address's tries).
            _same_origin(request, self._public(request))
        except ApiError:
            return self._login_page("Log in from the status page itself.", 403)
        try:
            form = await request.post()
        except (web.HTTPException, ConnectionResetError):
            raise  # too large (413); the client gone
        except Exception:
            # aiohttp's form parsers raise ValueError, LookupError (an unknown
            # charset), RuntimeError (an unknown transfer encoding)… for what a
            # client sent: its fault, whatever the class.
            return self._login_page("That form could not be read.", 400)
        address = client_of(request, self._proxies)
        try:
            self.throttle.check(address)  # past the limit, the token is not looked at
        except Throttled as exc:
            return self._login_page(str(exc), 429, exc.headers())
        token = form.get("token")
        if isinstance(token, str) and self.sessions.token.matches(token):
            response = web.HTTPSeeOther("/admin")
            self.sessions.set_cookie(request, response)
            raise response
        self.throttle.failed(address)
        return self._login_page("That token is not right.", 401)

    async def logout(self, request: web.Request) -> web.Response:
        try:
            _same_origin(request, self._public(request))
        except ApiError as exc:
            return exc.response()
        response = web.HTTPSeeOther("/admin")
        AdminSessions.clear_cookie(request, response)
        raise response

    def _login_page(
        self, message: str, status: int, headers: dict[str, str] | None = None
    ) -> web.Response:
        alert = f'<p class="error" role="alert">{message}</p>'  # the hub's own words only
        return _html(self._login.replace(_LOGIN_MESSAGE, alert), status, headers)

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        return web.Response(
            text=self._static[name],
            content_type=STATIC[name],
            headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
        )

    # ── JSON ────────────────────────────────────────────────────────────

    async def state(self, request: web.Request) -> web.Response:
        try:
            self._check(request)
            q = request.query
            return json_response(await self.snapshot(q.get("capability"), q.get("space")))
        except ApiError as exc:
            return exc.response()
        except BackplaneUnavailable as exc:
            return ApiError(ErrorCode.UNAVAILABLE, str(exc)).response()

    async def snapshot(self, capability: str | None, space: str | None) -> dict[str, Any]:
        """The cluster as the page shows it."""
        assert self.ops is not None
        docs = await self.ops.node_documents()
        rates: dict[str, float] = {}
        for doc in docs:
            for name, rate in (doc.pop("space_rates", None) or {}).items():
                # Every node with members of a space receives all its events.
                rates[name] = max(rates.get(name, 0.0), float(rate))
        spaces = await self.ops.spaces()
        for entry in spaces:
            entry["events_per_s"] = rates.get(entry["id"], 0.0)
        spaces.sort(key=lambda e: (-e["member_count"], e["id"]))
        page = await self.ops.agents(
            capability=capability or None, space=space or None, limit=MAX_AGENTS
        )
        return {
            "generated_at": codec.now_ms(),
            "node": self.ops.node_id,
            "nodes": docs,
            "spaces": spaces[:MAX_SPACES],
            "spaces_total": len(spaces),
            "agents": page["agents"],
            "agents_more": page["next_cursor"] is not None,
        }

    async def disconnect(self, request: web.Request) -> web.Response:
        assert self.ops is not None
        try:
            self._check(request)
            _same_origin_json(request, self._public(request))
            try:
                raw = await read_body(request, MAX_BODY)
                body = parse_json(raw) if raw.strip() else {}
            except BodyRefused as exc:
                code = "PAYLOAD_TOO_LARGE" if exc.status == 413 else ErrorCode.INVALID_REQUEST
                raise ApiError(code, str(exc)) from None
            reason = body.get("reason") if isinstance(body, dict) else None
            result = await self.ops.disconnect(request.match_info["agent_id"], reason)
            return json_response(result)
        except ApiError as exc:
            return exc.response()
        except BackplaneUnavailable as exc:
            return ApiError(ErrorCode.UNAVAILABLE, str(exc)).response()

    def _check(self, request: web.Request) -> None:
        try:
            authenticated = self._authenticated(request)
        except Throttled as exc:
            raise exc.error() from None
        if not authenticated:
            raise ApiError("UNAUTHENTICATED", "log in at /admin, or send Authorization: Bearer")

    def _authenticated(self, request: web.Request) -> bool:
        """A right ``Authorization: Bearer`` token, else a valid session cookie.
        A wrong bearer counts against the client's address, and past the
        limit (:class:`Throttled`) none is looked at. A cookie is no guess at
        the token (an HMAC of it): it is neither counted nor throttled, so an
        operator who is logged in is not locked out by a neighbour's guesses."""
        assert self.sessions is not None
        bearer = bearer_of(request)
        if bearer is None:
            return self.sessions.valid(request.cookies.get(COOKIE))
        address = client_of(request, self._proxies)
        self.throttle.check(address)
        if self.sessions.token.matches(bearer):
            return True
        self.throttle.failed(address)
        return False

    def _public(self, request: web.Request) -> str:
        """This request's origin as its client reached it (behind a trusted
        balancer, the one it names: nginx's ``Host $host`` drops the port)."""
        peer = request.transport.get_extra_info("peername") if request.transport else None
        return self._proxies.origin(peer, request.headers, request.scheme, request.host)


def _same_origin_json(request: web.Request, public: str) -> None:
    """Refuse what a page of another site could make a browser send: a JSON
    request (no form can be) that :func:`_same_origin` lets through."""
    if request.content_type != "application/json":
        raise ApiError(ErrorCode.INVALID_REQUEST, "send the request as application/json")
    _same_origin(request, public)


def _same_origin(request: web.Request, public: str) -> None:
    """Refuse a request a page of another site made the browser send (what
    Go's ``http.CrossOriginProtection`` does). ``Sec-Fetch-Site``, which
    every current browser sends, decides when present: ``same-origin`` (and
    ``none``, the user's own doing) pass, anything else — ``cross-site``,
    ``same-site`` (a sibling subdomain is another site) — is refused. Without
    it, a foreign ``Origin`` is refused (``null`` too: an opaque origin, a
    sandboxed frame's); no ``Origin`` at all is not a browser's request (or
    one too old to say) and passes. ``public``: see :meth:`StatusPage._public`."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        if site.strip().lower() in ("same-origin", "none"):
            return
        raise ApiError(ErrorCode.UNAUTHORIZED, "cross-origin requests are refused")
    origin = request.headers.get("Origin")
    if origin is None or origin in (public, f"{request.scheme}://{request.host}"):
        return
    # A TLS-terminating proxy that says nothing of it: only the scheme differs.
    if origin.partition("://")[2] not in (request.host, public.partition("://")[2]):
        raise ApiError(ErrorCode.UNAUTHORIZED, "cross-origin requests are refused")


def _html(text: str, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        text=text,
        status=status,
        content_type="text/html",
        headers={**HTML_HEADERS, **(headers or {})},
    )


async def _to_page(request: web.Request) -> web.Response:
    raise web.HTTPMovedPermanently("/admin")


async def _off(request: web.Request) -> web.Response:
    return web.Response(
        status=404, text="not found: the status page is off on this hub (admin_token is unset)\n"
    )
