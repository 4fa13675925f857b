import time

import jwt
import orjson
import pytest

from hub.auth import JwtAuth, NoAuth, TokenFileAuth
from hub.errors import AuthError, ConfigError


def test_no_auth_accepts_anyone():
    NoAuth().authenticate("anyone", None)


def test_token_file(tmp_path):
    path = tmp_path / "tokens.json"
    path.write_bytes(orjson.dumps({"alice": "s3cret"}))
    auth = TokenFileAuth(path)
    auth.authenticate("alice", "s3cret")
    for agent, token in [("alice", "s3cret2"), ("alice", None), ("bob", "s3cret"), ("alice", "")]:
        with pytest.raises(AuthError):
            auth.authenticate(agent, token)
    path.write_bytes(orjson.dumps({"alice": "new"}))
    auth.reload()
    auth.authenticate("alice", "new")


@pytest.mark.parametrize("content", [b"[]", b'{"a": 1}', b"nope", b'{"a": ""}'])
def test_token_file_must_be_an_object_of_strings(tmp_path, content):
    path = tmp_path / "tokens.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError):
        TokenFileAuth(path)


def test_jwt():
    auth = JwtAuth("k" * 32)
    good = jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, "k" * 32, algorithm="HS256")
    auth.authenticate("alice", good)
    with pytest.raises(AuthError, match="subject"):
        auth.authenticate("bob", good)
    none_alg = jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, None, algorithm="none")
    with pytest.raises(AuthError):
        auth.authenticate("alice", none_alg)
    with pytest.raises(AuthError, match="expired"):
        auth.authenticate(
            "alice",
            jwt.encode({"sub": "alice", "exp": int(time.time()) - 60}, "k" * 32, algorithm="HS256"),
        )
