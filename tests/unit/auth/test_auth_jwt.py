"""JWT authentication with a shared secret or a public key (keys made here)."""

import base64
import datetime
import hashlib
import hmac
import time

import jwt
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509.oid import NameOID

from hub.auth import JwtAuth, StaticKey
from hub.core.authz import Grant
from hub.errors import AuthError, ConfigError

SECRET = "k" * 32


def public_pem(private_key) -> bytes:
    return private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


@pytest.fixture(scope="module")
def keys():
    makers = {
        "rsa": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "p256": lambda: ec.generate_private_key(ec.SECP256R1()),
        "p384": lambda: ec.generate_private_key(ec.SECP384R1()),
        "ed25519": ed25519.Ed25519PrivateKey.generate,
        "ed448": ed448.Ed448PrivateKey.generate,
    }
    made = {name: make() for name, make in makers.items()}
    return made | {f"{name}-other": make() for name, make in makers.items()}


def claims(sub="alice", exp_in=60, **extra):
    return {"sub": sub, "exp": int(time.time()) + exp_in, **extra}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hand_made(header: dict, payload: dict, sign=lambda signing_input: b"") -> str:
    """A token built by hand, for what PyJWT itself refuses to produce."""
    signing_input = f"{b64(orjson.dumps(header))}.{b64(orjson.dumps(payload))}"
    return f"{signing_input}.{b64(sign(signing_input.encode()))}"


def hs256_auth(**options):
    return JwtAuth(StaticKey.from_secret(SECRET), **options)


def hs256(payload, **headers):
    return jwt.encode(payload, SECRET, algorithm="HS256", headers=headers or None)


@pytest.mark.parametrize(
    ("key_name", "alg"),
    [
        ("rsa", "RS256"),
        ("rsa", "RS512"),
        ("rsa", "PS256"),
        ("p256", "ES256"),
        ("p384", "ES384"),
        ("ed25519", "EdDSA"),
        ("ed448", "EdDSA"),
    ],
)
async def test_public_key_algorithms(keys, key_name, alg):
    private = keys[key_name]
    auth = JwtAuth(StaticKey.from_public_key_pem(public_pem(private)))
    payload = claims()
    grant = await auth.authenticate("alice", jwt.encode(payload, private, algorithm=alg))
    assert grant == Grant(expires_at=float(payload["exp"]))
    # Another key of the same type does not verify.
    other = keys[f"{key_name}-other"]
    with pytest.raises(AuthError, match="signature is invalid"):
        await auth.authenticate("alice", jwt.encode(payload, other, algorithm=alg))


async def test_hs256():
    payload = claims()
    assert await hs256_auth().authenticate("alice", hs256(payload)) == Grant(
        expires_at=float(payload["exp"])
    )
    wrong = jwt.encode(payload, "w" * 32, algorithm="HS256")
    with pytest.raises(AuthError, match="signature is invalid"):
        await hs256_auth().authenticate("alice", wrong)


async def test_the_key_decides_the_algorithm(keys):
    rsa_auth = JwtAuth(StaticKey.from_public_key_pem(public_pem(keys["rsa"])))
    p256_auth = JwtAuth(StaticKey.from_public_key_pem(public_pem(keys["p256"])))
    with pytest.raises(AuthError, match="algorithm not allowed"):
        await rsa_auth.authenticate("alice", jwt.encode(claims(), keys["p256"], algorithm="ES256"))
    with pytest.raises(AuthError, match="algorithm not allowed"):
        await p256_auth.authenticate("alice", jwt.encode(claims(), keys["rsa"], algorithm="RS256"))
    # A P-256 key verifies ES256 only, not the ES384 of another curve.
    with pytest.raises(AuthError, match="algorithm not allowed"):
        await p256_auth.authenticate("alice", jwt.encode(claims(), keys["p384"], algorithm="ES384"))
    with pytest.raises(AuthError, match="algorithm not allowed"):
        await rsa_auth.authenticate("alice", hs256(claims()))
    with pytest.raises(AuthError, match="algorithm not allowed"):
        await hs256_auth().authenticate(
            "alice", jwt.encode(claims(), keys["rsa"], algorithm="RS256")
        )


@pytest.mark.parametrize("alg", ["none", "None", "NONE", None, 5])
async def test_alg_none_is_never_accepted(keys, alg):
    token = hand_made({"alg": alg, "typ": "JWT"}, claims())
    for auth in (hs256_auth(), JwtAuth(StaticKey.from_public_key_pem(public_pem(keys["rsa"])))):
        with pytest.raises(AuthError, match="algorithm not allowed"):
            await auth.authenticate("alice", token)


async def test_algorithm_confusion_is_refused(keys):
    """An HS256 token 'signed' with the RSA public key PEM as the HMAC secret."""
    pem = public_pem(keys["rsa"])
    token = hand_made(
        {"alg": "HS256", "typ": "JWT"},
        claims(),
        lambda signing_input: hmac.new(pem, signing_input, hashlib.sha256).digest(),
    )
    auth = JwtAuth(StaticKey.from_public_key_pem(pem))
    with pytest.raises(AuthError, match="algorithm not allowed"):
        await auth.authenticate("alice", token)


async def test_exp_nbf_iat_with_leeway():
    now = int(time.time())
    auth = hs256_auth(leeway=30)
    await auth.authenticate("alice", hs256(claims(exp_in=-10)))  # within leeway
    await auth.authenticate("alice", hs256(claims(nbf=now + 10, iat=now + 10)))
    with pytest.raises(AuthError, match="token expired"):
        await auth.authenticate("alice", hs256(claims(exp_in=-60)))
    with pytest.raises(AuthError, match="not yet valid"):
        await auth.authenticate("alice", hs256(claims(nbf=now + 120)))
    with pytest.raises(AuthError, match="not yet valid"):
        await auth.authenticate("alice", hs256(claims(iat=now + 120)))
    with pytest.raises(AuthError, match="token expired"):
        await hs256_auth(leeway=0).authenticate("alice", hs256(claims(exp_in=-10)))
    grant = await auth.authenticate("alice", hs256(claims(exp=now + 60.5)))
    assert grant.expires_at == now + 60.5


async def test_exp_and_sub_are_required():
    with pytest.raises(AuthError, match="lacks the 'exp' claim"):
        await hs256_auth().authenticate("alice", hs256({"sub": "alice"}))
    with pytest.raises(AuthError, match="lacks the 'sub' claim"):
        await hs256_auth().authenticate("alice", hs256({"exp": int(time.time()) + 60}))


@pytest.mark.parametrize(
    ("claim", "value", "reason"),
    [
        ("exp", "99999999999", "token claim 'exp' must be a number"),
        ("exp", 10**30, "token claim 'exp' must be a number"),
        ("exp", 1e300, "token claim 'exp' must be a number"),
        ("exp", True, "token expired"),  # PyJWT reads it as 1
        ("exp", "soon", "malformed token"),
        ("nbf", "0", "token claim 'nbf' must be a number"),
        ("nbf", False, "token claim 'nbf' must be a number"),
        ("iat", "0", "token claim 'iat' must be a number"),
    ],
)
async def test_registered_time_claims_must_be_numbers(claim, value, reason):
    payload = {**claims(), claim: value}
    with pytest.raises(AuthError) as err:
        await hs256_auth().authenticate("alice", hs256(payload))
    assert str(err.value) == reason


async def test_string_exp_is_refused_with_a_clear_reason():
    payload = {**claims(), "exp": str(int(time.time()) + 3600)}
    with pytest.raises(AuthError, match="token claim 'exp' must be a number"):
        await hs256_auth().authenticate("alice", hs256(payload))


async def test_subject_must_be_the_agent_id():
    with pytest.raises(AuthError, match="subject does not match"):
        await hs256_auth().authenticate("bob", hs256(claims("alice")))
    with pytest.raises(AuthError, match="'sub' must be a string"):
        await hs256_auth().authenticate("123", hs256({**claims(), "sub": 123}))


async def test_audience_and_issuer():
    auth = hs256_auth(audience="agora", issuer="https://idp.example/")
    good = claims(aud="agora", iss="https://idp.example/")
    await auth.authenticate("alice", hs256(good))
    await auth.authenticate("alice", hs256({**good, "aud": ["other", "agora"]}))
    for bad, reason in [
        ({**good, "aud": "other"}, "audience not accepted"),
        ({**good, "iss": "https://evil.example/"}, "issuer not accepted"),
        ({k: v for k, v in good.items() if k != "aud"}, "lacks the 'aud' claim"),
        ({k: v for k, v in good.items() if k != "iss"}, "lacks the 'iss' claim"),
    ]:
        with pytest.raises(AuthError, match=reason):
            await auth.authenticate("alice", hs256(bad))
    # With no audience configured, a token meant for some audience is refused (RFC 7519).
    with pytest.raises(AuthError, match="audience not accepted"):
        await hs256_auth().authenticate("alice", hs256(claims(aud="agora")))


async def test_join_and_publish_claims_become_the_grant():
    payload = claims(join=["task.*", "lobby"], publish=["task.ci.*"])
    grant = await hs256_auth().authenticate("alice", hs256(payload))
    assert grant == Grant(
        join=("task.*", "lobby"), publish=("task.ci.*",), expires_at=float(payload["exp"])
    )
    for bad in ({"join": "task.*"}, {"publish": [1]}, {"join": [""]}, {"join": ["a"] * 101}):
        with pytest.raises(AuthError, match=r"token claim '(join|publish)'"):
            await hs256_auth().authenticate("alice", hs256(claims(**bad)))


async def test_missing_token():
    for token in (None, ""):
        with pytest.raises(AuthError, match="a JWT is required"):
            await hs256_auth().authenticate("alice", token)


MARK = "Zq9sekrit"


async def test_the_token_never_appears_in_an_error_message(keys):
    b64mark = b64(MARK.encode() * 3)
    tokens = [
        MARK,
        f"{MARK}.{MARK}.{MARK}",
        f"{b64mark}.{b64mark}.{b64mark}",
        hand_made({"alg": "HS256", "kid": MARK}, {"sub": MARK}),
        hand_made({"alg": MARK}, claims()),
        hs256(claims(MARK)),
        hs256(claims(exp_in=-3600, jti=MARK)),
        hs256({**claims(), "exp": MARK}),
        hs256({**claims(), "nbf": MARK}),
        hs256({**claims(), "iat": MARK}),
        hs256(claims(aud=MARK)),
        hs256(claims(join=MARK, publish=[MARK * 40])),
        jwt.encode(claims(), "w" * 32, algorithm="HS256", headers={"kid": MARK}),
        jwt.encode(claims(), keys["rsa"], algorithm="RS256"),
        hs256(claims())[:-5] + MARK,
    ]
    auth = hs256_auth(issuer="iss")
    for token in tokens:
        with pytest.raises(AuthError) as err:
            await auth.authenticate("alice", token)
        message = str(err.value)
        assert MARK not in message and token not in message, message


# ── loading public keys ─────────────────────────────────────────────────────


def test_a_certificate_is_accepted(tmp_path, keys):
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "idp")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(keys["rsa"].public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(keys["rsa"], hashes.SHA256())
    )
    path = tmp_path / "idp.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    assert StaticKey.from_public_key_file(path)


async def test_a_public_key_file(tmp_path, keys):
    path = tmp_path / "idp.pem"
    path.write_bytes(public_pem(keys["ed25519"]))
    auth = JwtAuth(StaticKey.from_public_key_file(path))
    payload = claims(join=["team-*"])
    token = jwt.encode(payload, keys["ed25519"], algorithm="EdDSA")
    grant = await auth.authenticate("alice", token)
    assert grant == Grant(join=("team-*",), expires_at=float(payload["exp"]))
    # The file's key, and no other, verifies.
    with pytest.raises(AuthError, match="signature is invalid"):
        forged = jwt.encode(payload, keys["ed25519-other"], algorithm="EdDSA")
        await auth.authenticate("alice", forged)


def _private_pem(key):
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda k: _private_pem(k["p256"]), "is a private key"),
        (lambda k: b"-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n", "not a PEM"),
        (lambda k: b"", "not a PEM"),
        (
            lambda k: public_pem(rsa.generate_private_key(public_exponent=65537, key_size=1024)),
            "RSA key of 1024 bits",
        ),
        (lambda k: public_pem(ec.generate_private_key(ec.SECP256K1())), "unsupported elliptic"),
        (lambda k: public_pem(dsa.generate_private_key(key_size=2048)), "unsupported key type"),
    ],
)
def test_unusable_key_files_are_config_errors(tmp_path, keys, make, message):
    path = tmp_path / "key.pem"
    path.write_bytes(make(keys))
    with pytest.raises(ConfigError, match=message) as err:
        StaticKey.from_public_key_file(path)
    assert str(path) in str(err.value)


def test_short_secrets_are_refused():
    with pytest.raises(ConfigError, match="at least 32 bytes"):
        StaticKey.from_secret("k" * 31)
    assert StaticKey.from_secret("k" * 32)


async def test_a_bearer_token_alone_names_its_subject():
    auth = hs256_auth()
    agent_id, grant = await auth.identify(hs256(claims("alice", join=["lab*"])))
    assert agent_id == "alice" and grant.join == ("lab*",)
    for token, reason in [
        (None, "a JWT is required"),
        (hs256({**claims(), "sub": "not an id!"}), "not a valid agent id"),
        (jwt.encode(claims("alice"), "w" * 32, algorithm="HS256"), "signature"),
    ]:
        with pytest.raises(AuthError, match=reason):
            await auth.identify(token)
