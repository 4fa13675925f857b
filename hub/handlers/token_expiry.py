"""A live connection's credentials: ``agent.refresh`` before its token expires.

A connection authenticated by a token that expires (a JWT's ``exp``) lives as
long as its token. The node's sweep asks every session about its expiry once
per pass — no task or timer per connection: past ``exp`` + ``jwt_leeway`` the
session answers with a ``token expired`` notice, and ``token_refresh_grace``
seconds later, unless ``agent.refresh`` came with a good token, with the close
(4401). The decisions are the session's
(:meth:`~hub.core.session.Session.check_expiry`), carried out by the
dispatcher; this module authenticates refreshes.

A refresh is authenticated exactly like a handshake, for the connection's own
agent id: a token for another agent, an expired or forged one, is refused
(``UNAUTHORIZED``) and changes nothing — the expiry clock keeps running. A
good one replaces the connection's grant (its ``join`` / ``publish`` claims
apply to later requests; memberships already made stay) and is answered
``agent.refreshed {id, expires_at}``.
"""

from __future__ import annotations

from hub.auth import Authenticator
from hub.core.actions import Refresh
from hub.core.peer import Peer
from hub.core.session import SessionState
from hub.errors import AuthError
from protocol import codec
from protocol.errors import ErrorCode, ProtocolError


class TokenExpiry:
    """Refreshes credentials on request and enforces their expiry."""

    def __init__(self, auth: Authenticator):
        self.auth = auth

    async def refresh(self, conn: Peer, a: Refresh) -> None:
        """The handler of the session's :class:`~hub.core.session.Refresh` action."""
        session = conn.session
        assert session is not None
        try:
            grant = await self.auth.authenticate(conn.agent_id, a.token)
        except AuthError as exc:
            # The reason never quotes the token (see hub.auth).
            raise ProtocolError(
                ErrorCode.UNAUTHORIZED, f"refresh refused: {exc}", a.request_id
            ) from None
        if conn.closing or session.state is not SessionState.OPEN:
            return  # closed meanwhile (the grace ran out during a JWKS fetch)
        session.refreshed(grant)
        conn.send_frame(codec.refreshed(a.request_id, grant.expires_at))
