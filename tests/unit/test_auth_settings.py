"""The auth settings: one JWT key source, no JWT settings without JWT, bounds."""

import pytest

from hub.config.settings import load_settings
from hub.errors import ConfigError

URL = "https://idp.example/.well-known/jwks.json"


def test_defaults():
    s = load_settings()
    assert (s.jwt_public_key, s.jwt_jwks_url, s.jwt_audience, s.jwt_issuer) == (None,) * 4
    assert (s.jwt_leeway, s.token_refresh_grace) == (30.0, 30.0)


@pytest.mark.parametrize(
    "source",
    [{"jwt_secret": "k" * 32}, {"jwt_public_key": "/etc/idp.pem"}, {"jwt_jwks_url": URL}],
)
def test_jwt_takes_exactly_one_key_source(source):
    s = load_settings({"auth_mode": "jwt", **source})
    assert s.auth_mode == "jwt"


@pytest.mark.parametrize(
    "sources",
    [
        {},
        {"jwt_secret": ""},
        {"jwt_secret": "k" * 32, "jwt_jwks_url": URL},
        {"jwt_public_key": "/etc/idp.pem", "jwt_jwks_url": URL},
        {"jwt_secret": "k" * 32, "jwt_public_key": "/etc/idp.pem"},
    ],
)
def test_jwt_with_no_or_several_key_sources_is_refused(sources):
    with pytest.raises(ConfigError, match="exactly one of jwt_secret, jwt_public_key"):
        load_settings({"auth_mode": "jwt", **sources})


@pytest.mark.parametrize(
    "extra",
    [
        {"jwt_secret": "k" * 32},
        {"jwt_jwks_url": URL},
        {"jwt_public_key": "/etc/idp.pem"},
        {"jwt_audience": "agora"},
        {"jwt_issuer": "https://idp.example/"},
    ],
)
def test_jwt_settings_without_jwt_mode_are_refused(extra):
    # Otherwise a forgotten auth_mode would silently run the hub without auth.
    with pytest.raises(ConfigError, match="jwt_\\* settings need auth_mode=jwt"):
        load_settings(extra)


@pytest.mark.parametrize("url", ["ftp://idp/jwks", "idp.example/jwks", "file:///etc/jwks.json"])
def test_jwks_url_must_be_http(url):
    with pytest.raises(ConfigError, match="jwt_jwks_url must be an http"):
        load_settings({"auth_mode": "jwt", "jwt_jwks_url": url})


def test_env_vars_and_audience(monkeypatch):
    monkeypatch.setenv("AGORA_HUB_AUTH_MODE", "jwt")
    monkeypatch.setenv("AGORA_HUB_JWT_JWKS_URL", URL)
    monkeypatch.setenv("AGORA_HUB_JWT_AUDIENCE", "agora")
    monkeypatch.setenv("AGORA_HUB_JWT_LEEWAY", "5")
    monkeypatch.setenv("AGORA_HUB_TOKEN_REFRESH_GRACE", "2.5")
    s = load_settings()
    assert (s.jwt_jwks_url, s.jwt_audience, s.jwt_leeway, s.token_refresh_grace) == (
        URL,
        "agora",
        5.0,
        2.5,
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"jwt_leeway": -1},
        {"jwt_leeway": 301},
        {"token_refresh_grace": 0},
        {"token_refresh_grace": -5},
    ],
)
def test_bounds(bad):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        load_settings(bad)


def test_bounds_are_inclusive():
    assert load_settings({"jwt_leeway": 0}).jwt_leeway == 0
    assert load_settings({"jwt_leeway": 300}).jwt_leeway == 300
