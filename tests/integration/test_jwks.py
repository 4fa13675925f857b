"""JWKS keys fetched from a real local HTTP server playing the identity provider."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import time
from collections.abc import AsyncIterator
from typing import Any

import jwt
import orjson
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from hub.auth import JwksKeys, JwtAuth
from hub.auth.jwks import MAX_JWKS_BYTES
from hub.errors import AuthError


class Clock:
    """A monotonic clock the test moves by hand (no sleeping)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Idp:
    """An aiohttp server serving a JWKS document the test changes at will."""

    def __init__(self) -> None:
        self.document: bytes = b'{"keys": []}'
        self.status = 200
        self.hits = 0
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def _jwks(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.Response(body=self.document, status=self.status, content_type="application/json")

    def publish(self, *jwks: dict[str, Any]) -> None:
        self.document = orjson.dumps({"keys": list(jwks)})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/jwks.json", self._jwks)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/jwks.json"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


@pytest.fixture
async def idp() -> AsyncIterator[Idp]:
    server = Idp()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture(scope="module")
def rsa_keys():
    return [rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(3)]


def jwk(private_key, kid: str | None, **extra: Any) -> dict[str, Any]:
    public = private_key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        data = RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        data = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        data = OKPAlgorithm.to_jwk(public, as_dict=True)
    return {**data, **({"kid": kid} if kid else {}), "use": "sig", **extra}


def token(private_key, kid: str | None, alg: str = "RS256", sub: str = "alice") -> str:
    headers = {"kid": kid} if kid else None
    claims = {"sub": sub, "exp": int(time.time()) + 60}
    return jwt.encode(claims, private_key, algorithm=alg, headers=headers)


@pytest.fixture
async def make_auth() -> AsyncIterator[Any]:
    made: list[JwtAuth] = []

    def _make(url: str, **options: Any) -> tuple[JwtAuth, JwksKeys]:
        keys = JwksKeys(url, **options)
        auth = JwtAuth(keys)
        made.append(auth)
        return auth, keys

    yield _make
    for auth in made:
        await auth.aclose()


async def test_keys_are_fetched_once_cached_and_rotated(idp, rsa_keys, make_auth):
    k1, k2, _ = rsa_keys
    clock = Clock()
    idp.publish(jwk(k1, "k1"))
    auth, keys = make_auth(idp.url, clock=clock, min_refresh_interval=30)
    grant = await auth.authenticate("alice", token(k1, "k1"))
    assert grant.expires_at is not None
    await auth.authenticate("alice", token(k1, "k1"))
    assert idp.hits == 1

    # The provider rotates: k2 appears. A refresh is due only 30 s after the last one.
    idp.publish(jwk(k1, "k1"), jwk(k2, "k2"))
    clock.now += 10
    with pytest.raises(AuthError, match="unknown key"):
        await auth.authenticate("alice", token(k2, "k2"))
    assert idp.hits == 1
    clock.now += 25
    await auth.authenticate("alice", token(k2, "k2"))
    assert idp.hits == 2 and keys.kids == ["k1", "k2"]

    # k1 is withdrawn: once the cache is older than max_age it is refreshed in
    # the background, and k1 stops working.
    idp.publish(jwk(k2, "k2"))
    clock.now += 601
    await auth.authenticate("alice", token(k1, "k1"))  # served from cache meanwhile
    assert await keys.refresh() is True  # the same fetch, already under way, lands
    assert idp.hits == 3
    assert keys.kids == ["k2"]
    clock.now += 60
    with pytest.raises(AuthError, match="unknown key"):
        await auth.authenticate("alice", token(k1, "k1"))


async def test_concurrent_handshakes_share_one_fetch(idp, rsa_keys, make_auth):
    k1 = rsa_keys[0]
    idp.publish(jwk(k1, "k1"))
    auth, _ = make_auth(idp.url)
    grants = await asyncio.gather(
        *(auth.authenticate(f"agent-{i}", token(k1, "k1", sub=f"agent-{i}")) for i in range(20))
    )
    assert len(grants) == 20
    assert idp.hits == 1


async def test_known_keys_survive_the_provider_going_away(idp, rsa_keys, make_auth):
    k1, k2, _ = rsa_keys
    clock = Clock()
    idp.publish(jwk(k1, "k1"))
    auth, keys = make_auth(idp.url, clock=clock)
    await auth.authenticate("alice", token(k1, "k1"))
    await idp.stop()
    clock.now += 10_000  # every refresh is due, and the cache is stale
    await auth.authenticate("alice", token(k1, "k1"))
    with pytest.raises(AuthError, match="unknown key"):
        await auth.authenticate("alice", token(k2, "k2"))
    assert await keys.refresh() is False
    await auth.authenticate("alice", token(k1, "k1"))
    assert keys.kids == ["k1"]


async def test_a_failing_provider_is_not_hammered(idp, rsa_keys, make_auth):
    k1, k2, k3 = rsa_keys
    clock = Clock()
    idp.publish(jwk(k1, "k1"))
    auth, _ = make_auth(idp.url, clock=clock, min_refresh_interval=30)
    await auth.authenticate("alice", token(k1, "k1"))
    idp.status = 503
    clock.now += 31
    for _ in range(3):
        results = await asyncio.gather(
            *(auth.authenticate("alice", token(k, kid)) for k, kid in [(k2, "k2"), (k3, "k3")]),
            return_exceptions=True,
        )
        assert all(isinstance(r, AuthError) for r in results)
    assert idp.hits == 2  # one initial fetch, one refresh attempt
    await auth.authenticate("alice", token(k1, "k1"))
    # The provider recovers with k2; the next refresh is allowed 30 s later.
    idp.status = 200
    idp.publish(jwk(k1, "k1"), jwk(k2, "k2"))
    clock.now += 30
    await auth.authenticate("alice", token(k2, "k2"))
    assert idp.hits == 3


async def test_a_provider_that_never_answers_times_out(make_auth, rsa_keys):
    connections = 0
    hung: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        hung.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    clock = Clock()
    auth, _ = make_auth(f"http://127.0.0.1:{port}/jwks.json", timeout=0.3, clock=clock)
    try:
        with pytest.raises(AuthError, match="keys are unavailable"):
            await asyncio.wait_for(auth.authenticate("alice", token(rsa_keys[0], "k1")), 10)
        # With no key known, retries come after retry_interval (5 s), not on every handshake.
        with pytest.raises(AuthError, match="keys are unavailable"):
            await auth.authenticate("alice", token(rsa_keys[0], "k1"))
        assert connections == 1
        clock.now += 5
        with pytest.raises(AuthError, match="keys are unavailable"):
            await asyncio.wait_for(auth.authenticate("alice", token(rsa_keys[0], "k1")), 10)
        assert connections == 2
    finally:
        for writer in hung:
            writer.close()
        server.close()
        await server.wait_closed()


def _hs256_with(secret: bytes, kid: str) -> str:
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(orjson.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}))
    payload = b64(orjson.dumps({"sub": "alice", "exp": int(time.time()) + 60}))
    signature = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64(signature)}"


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
async def test_only_asymmetric_signature_keys_are_taken(idp, rsa_keys, make_auth):
    k1, k2, _ = rsa_keys
    ec_key = ec.generate_private_key(ec.SECP256R1())
    ed_key = ed25519.Ed25519PrivateKey.generate()
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    oct_secret = b"s" * 32
    idp.publish(
        jwk(k1, "rsa"),
        jwk(ec_key, "ec"),
        jwk(ed_key, "ed"),
        jwk(k2, "ps", alg="PS256"),
        {"kty": "oct", "kid": "hs", "k": base64.urlsafe_b64encode(oct_secret).decode()},
        jwk(k2, "enc", use="enc"),
        jwk(k2, "mismatch", alg="ES256"),
        jwk(weak, "weak"),
        {"kty": "RSA", "kid": "broken"},
        {"kid": "no-kty"},
        "not-an-object",
        jwk(k2, 7),
    )
    auth, keys = make_auth(idp.url)
    await auth.authenticate("alice", token(ec_key, "ec", alg="ES256"))
    assert keys.kids == ["rsa", "ec", "ed", "ps"]
    await auth.authenticate("alice", token(ed_key, "ed", alg="EdDSA"))
    await auth.authenticate("alice", token(k2, "ps", alg="PS256"))
    # Each key verifies only its own algorithm.
    with pytest.raises(AuthError, match="algorithm not allowed"):
        await auth.authenticate("alice", token(k2, "ps", alg="RS256"))
    # A symmetric JWKS entry is never used as an HMAC secret...
    with pytest.raises(AuthError, match="unknown key"):
        await auth.authenticate("alice", _hs256_with(oct_secret, "hs"))
    # ...and neither is a public key (algorithm confusion).
    pem = k1.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(AuthError, match="algorithm not allowed"):
        await auth.authenticate("alice", _hs256_with(pem, "rsa"))
    with pytest.raises(AuthError, match="unknown key"):
        await auth.authenticate("alice", token(weak, "weak"))


async def test_a_token_without_kid_needs_an_unambiguous_key(idp, rsa_keys, make_auth):
    k1, k2, _ = rsa_keys
    clock = Clock()
    idp.publish(jwk(k1, None))
    auth, _ = make_auth(idp.url, clock=clock)
    await auth.authenticate("alice", token(k1, None))
    idp.publish(jwk(k1, "k1"), jwk(k2, "k2"))
    clock.now += 31
    await auth.authenticate("alice", token(k2, "k2"))  # refresh
    with pytest.raises(AuthError, match="unknown key"):
        await auth.authenticate("alice", token(k1, None))


@pytest.mark.parametrize(
    ("status", "document"),
    [
        (500, None),
        (200, b"<html>sorry</html>"),
        (200, b'{"no": "keys"}'),
        (200, b'{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}'),
        (200, b" " * (MAX_JWKS_BYTES + 1)),
    ],
)
async def test_a_bad_document_keeps_the_old_keys(idp, rsa_keys, make_auth, status, document):
    k1, k2, _ = rsa_keys
    clock = Clock()
    idp.publish(jwk(k1, "k1"))
    auth, keys = make_auth(idp.url, clock=clock)
    await auth.authenticate("alice", token(k1, "k1"))
    idp.status = status
    if document is not None:
        idp.document = document
    clock.now += 31
    assert await keys.refresh() is False
    assert idp.hits == 2
    await auth.authenticate("alice", token(k1, "k1"))
    with pytest.raises(AuthError, match="unknown key"):
        await auth.authenticate("alice", token(k2, "k2"))


async def test_a_document_of_exactly_the_size_limit_is_accepted(idp, rsa_keys, make_auth):
    k1 = rsa_keys[0]
    idp.publish(jwk(k1, "k1"))
    idp.document += b" " * (MAX_JWKS_BYTES - len(idp.document))
    assert len(idp.document) == MAX_JWKS_BYTES
    auth, _ = make_auth(idp.url)
    await auth.authenticate("alice", token(k1, "k1"))


async def test_closed_keys_fetch_nothing(idp, rsa_keys):
    idp.publish(jwk(rsa_keys[0], "k1"))
    keys = JwksKeys(idp.url)
    auth = JwtAuth(keys)
    await auth.aclose()
    await auth.aclose()  # idempotent
    with pytest.raises(AuthError, match="keys are unavailable"):
        await auth.authenticate("alice", token(rsa_keys[0], "k1"))
    assert idp.hits == 0
