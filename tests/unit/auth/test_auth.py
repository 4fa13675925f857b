"""``none`` and ``tokens`` authentication, and choosing the authenticator from settings."""

import orjson
import pytest

from hub.auth import JwksKeys, JwtAuth, NoAuth, StaticKey, TokenFileAuth, build_authenticator
from hub.config.settings import load_settings
from hub.core.authz import Grant
from hub.errors import AuthError, ConfigError


async def test_no_auth_accepts_anyone_unrestricted():
    assert await NoAuth().authenticate("anyone", None) is Grant.unrestricted


def _tokens(tmp_path, data):
    path = tmp_path / "tokens.json"
    path.write_bytes(orjson.dumps(data) if not isinstance(data, bytes) else data)
    return path


async def test_token_file(tmp_path):
    path = _tokens(tmp_path, {"alice": "s3cret"})
    auth = TokenFileAuth(path)
    assert await auth.authenticate("alice", "s3cret") is Grant.unrestricted
    for agent, token in [("alice", "s3cret2"), ("bob", "s3cret")]:
        with pytest.raises(AuthError, match="invalid token"):
            await auth.authenticate(agent, token)
    for token in (None, ""):  # the message says what is wrong, and nothing more
        with pytest.raises(AuthError, match="a token is required"):
            await auth.authenticate("alice", token)


async def test_token_file_entries_with_claims(tmp_path):
    path = _tokens(
        tmp_path,
        {
            "alice": "s3cret",
            "ci-bot": {"token": "t0k", "join": ["task.*", "lobby"], "publish": ["task.ci.*"]},
            "reader": {"token": "r34d", "publish": []},
            "plain": {"token": "pl41n"},
            "nulls": {"token": "nu11", "join": None, "publish": None},
        },
    )
    auth = TokenFileAuth(path)
    grant = await auth.authenticate("ci-bot", "t0k")
    assert grant == Grant(join=("task.*", "lobby"), publish=("task.ci.*",))
    assert grant.expires_at is None
    assert await auth.authenticate("reader", "r34d") == Grant(publish=())
    assert await auth.authenticate("plain", "pl41n") is Grant.unrestricted
    assert await auth.authenticate("nulls", "nu11") is Grant.unrestricted
    with pytest.raises(AuthError):
        await auth.authenticate("ci-bot", "s3cret")  # another agent's token


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[]", "must be a JSON object"),
        (b"nope", "not valid JSON"),
        (b'{"a": 1}', "agent 'a': the value must be a token string"),
        (b'{"a": ""}', "agent 'a': the token is empty"),
        (b'{"a": {"join": ["x"]}}', "agent 'a': \"token\" must be a non-empty string"),
        (b'{"a": {"token": ""}}', "agent 'a': \"token\" must be a non-empty string"),
        (b'{"a": {"token": "t", "join": "x*"}}', "agent 'a': \"join\" must be a list"),
        (b'{"a": {"token": "t", "publish": [1]}}', "agent 'a': \"publish\" must be a list"),
        (b'{"a": {"token": "t", "admin": true}}', "agent 'a': unknown field\\(s\\) admin"),
        (b'{"not valid!": "t"}', "'not valid!' is not a valid agent id"),
    ],
)
def test_token_file_errors_name_the_file_and_the_agent(tmp_path, content, message):
    path = _tokens(tmp_path, content)
    with pytest.raises(ConfigError, match=message) as err:
        TokenFileAuth(path)
    assert str(path) in str(err.value)


def test_token_file_errors_never_show_a_token(tmp_path):
    for bad in (
        {"ok": "good-token-value", "a": {"token": "sekrit-token-value", "join": "x"}},
        {"a": {"token": "sekrit-token-value", "extra": 1}},
        {"a": {"token": "sekrit-token-value", "publish": ["x" * 300]}},
    ):
        with pytest.raises(ConfigError) as err:
            TokenFileAuth(_tokens(tmp_path, bad))
        assert "token-value" not in str(err.value)


def test_missing_token_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read tokens file"):
        TokenFileAuth(tmp_path / "absent.json")


async def test_reload_swaps_the_file_in_and_keeps_the_old_tokens_when_it_is_bad(tmp_path):
    path = _tokens(tmp_path, {"alice": "old", "bob": "b0b"})
    auth = TokenFileAuth(path)
    path.write_bytes(orjson.dumps({"alice": {"token": "new", "join": ["lobby"]}}))
    auth.reload()
    assert await auth.authenticate("alice", "new") == Grant(join=("lobby",))
    with pytest.raises(AuthError):
        await auth.authenticate("alice", "old")
    with pytest.raises(AuthError):
        await auth.authenticate("bob", "b0b")  # removed from the file

    # A file broken halfway (second entry bad) changes nothing.
    path.write_bytes(b'{"alice": "newer", "carol": {"token": ""}}')
    with pytest.raises(ConfigError, match="carol"):
        auth.reload()
    path.unlink()
    with pytest.raises(ConfigError):
        auth.reload()
    assert await auth.authenticate("alice", "new") == Grant(join=("lobby",))
    with pytest.raises(AuthError):
        await auth.authenticate("alice", "newer")


async def test_build_authenticator_follows_settings(tmp_path):
    assert isinstance(build_authenticator(load_settings()), NoAuth)

    path = _tokens(tmp_path, {"alice": "s3cret"})
    auth = build_authenticator(
        load_settings({"auth_mode": "tokens", "auth_tokens_file": str(path)})
    )
    assert isinstance(auth, TokenFileAuth)
    await auth.aclose()

    auth = build_authenticator(load_settings({"auth_mode": "jwt", "jwt_secret": "k" * 32}))
    assert isinstance(auth, JwtAuth) and isinstance(auth.keys, StaticKey)
    await auth.aclose()

    auth = build_authenticator(
        load_settings({"auth_mode": "jwt", "jwt_jwks_url": "https://idp.example/jwks.json"})
    )
    assert isinstance(auth, JwtAuth) and isinstance(auth.keys, JwksKeys)
    assert auth.keys.url == "https://idp.example/jwks.json"
    await auth.aclose()


def test_build_authenticator_reports_an_unusable_key_file(tmp_path):
    settings = load_settings({"auth_mode": "jwt", "jwt_public_key": str(tmp_path / "nope.pem")})
    with pytest.raises(ConfigError, match="cannot read jwt_public_key"):
        build_authenticator(settings)


async def test_a_bearer_token_alone_names_its_agent(tmp_path):
    path = _tokens(tmp_path, {"alice": "s3cret", "ci-bot": {"token": "t0k", "join": ["task.*"]}})
    auth = TokenFileAuth(path)
    assert await auth.identify("s3cret") == ("alice", Grant.unrestricted)
    assert await auth.identify("t0k") == ("ci-bot", Grant(join=("task.*",)))
    for token in ("nope", "s3cret "):
        with pytest.raises(AuthError, match="invalid token"):
            await auth.identify(token)
    for token in ("", None):
        with pytest.raises(AuthError, match="a token is required"):
            await auth.identify(token)
    with pytest.raises(AuthError, match="no authentication"):
        await NoAuth().identify("anything")
