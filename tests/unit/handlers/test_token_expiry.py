"""``agent.refresh``: a good token replaces the connection's grant and stops the
expiry clock; a refused one changes nothing. A fake authenticator stands in
for the tokens file or the JWT checks (tests/unit/auth/ test those)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from hub.core.actions import Close, Reject
from hub.core.authz import Grant
from hub.errors import AuthError
from tests.support.handlers import HandlerRig, until
from tests.support.peers import FakePeer

SECRET = "s3cr3t-token-value"


class FakeAuthenticator:
    """Tokens it knows, each with the grant it gives; anything else is refused."""

    def __init__(self, grants: dict[str, Grant]):
        self.grants = grants
        self.asked: list[tuple[str, str | None]] = []
        #: Set to hold ``authenticate`` until the test lets it go.
        self.gate: asyncio.Event | None = None

    async def authenticate(self, agent_id: str, token: str | None) -> Grant:
        self.asked.append((agent_id, token))
        if self.gate is not None:
            await self.gate.wait()
        grant = self.grants.get(token or "")
        if grant is None:
            raise AuthError("invalid token")
        return grant

    async def identify(self, token: str | None) -> tuple[str, Grant]:
        raise AuthError("not used here")

    async def aclose(self) -> None:
        return None


def refresh(token: str = SECRET, rid: str = "r1") -> dict[str, Any]:
    return {"type": "agent.refresh", "id": rid, "token": token}


async def expired_connection(make_rig: Any, **grants: Grant) -> tuple[HandlerRig, FakePeer, Any]:
    """A connection whose token expired (its notice sent), and the authenticator."""
    auth = FakeAuthenticator(grants)
    rig = await make_rig(auth=auth, token_refresh_grace=30.0)
    wall = time.time()
    alice = await rig.connect("alice", grant=Grant(expires_at=wall - 1))
    assert isinstance(alice.session.check_expiry(wall), Reject), "the expiry notice"
    return rig, alice, auth


async def test_a_good_token_is_accepted_and_stops_the_expiry_clock(make_rig: Any) -> None:
    later = time.time() + 3600
    new = Grant(join=("room",), expires_at=later)
    rig, alice, auth = await expired_connection(make_rig, **{SECRET: new})
    await rig.send(alice, refresh())
    assert alice.one() == {
        "type": "agent.refreshed",
        "expires_at": round(later * 1000),
        "id": "r1",
    }
    assert auth.asked == [("alice", SECRET)], "for the connection's own agent id"
    assert alice.session.grant is new
    grace_over = time.time() + 31
    assert alice.session.check_expiry(grace_over) is None, "no close after the grace"
    await rig.send(alice, {"type": "space.join", "id": "j", "space": "other"})
    assert alice.errors() == [("UNAUTHORIZED", "j")], "the new grant's claims apply"


async def test_a_refused_token_changes_nothing(make_rig: Any) -> None:
    rig, alice, _ = await expired_connection(make_rig)
    old = alice.session.grant
    await rig.send(alice, refresh("wrong-token"))
    error = alice.one()
    assert (error["type"], error["code"], error["request_id"]) == ("error", "UNAUTHORIZED", "r1")
    assert error["message"] == "refresh refused: invalid token"
    assert "wrong-token" not in alice.frames[0].decode()
    assert alice.session.grant is old
    assert isinstance(alice.session.check_expiry(time.time() + 31), Close), "the clock ran on"
    assert not alice.closing, "a refusal is an error, the close is the sweep's"


async def test_a_token_for_credentials_without_expiry_clears_the_deadline(make_rig: Any) -> None:
    rig, alice, _ = await expired_connection(make_rig, **{SECRET: Grant()})
    await rig.send(alice, refresh())
    assert alice.one()["expires_at"] is None
    assert alice.session.check_expiry(time.time() + 10**6) is None


async def test_a_connection_closed_during_the_check_is_left_alone(make_rig: Any) -> None:
    new = Grant(expires_at=time.time() + 3600)
    rig, alice, auth = await expired_connection(make_rig, **{SECRET: new})
    old = alice.session.grant
    auth.gate = asyncio.Event()
    refreshing = asyncio.create_task(rig.send(alice, refresh()))
    await until(lambda: bool(auth.asked))
    alice.session.begin_close()  # e.g. the grace ran out during a JWKS fetch
    auth.gate.set()
    await refreshing
    assert alice.frames == [] and alice.session.grant is old


async def test_without_a_token_the_refresh_is_invalid(make_rig: Any) -> None:
    rig, alice, auth = await expired_connection(make_rig)
    await rig.send(alice, {"type": "agent.refresh", "id": "r1"})
    assert alice.errors() == [("INVALID_REQUEST", "r1")]
    assert auth.asked == []
