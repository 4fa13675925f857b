"""Mistakes in the configuration are reported clearly: unknown variables and keys
with the closest setting, missing files with their purpose; trusted_proxies
parsing; what SIGHUP re-reads."""

import pytest

from adapters import from_settings
from hub.config.settings import check_files, load_settings, reread_settings, unknown_env_vars
from hub.errors import ConfigError
from hub.process.cli import build_parser, settings_from_args
from hub.process.reload import restart_needed


@pytest.fixture(autouse=True)
def _no_hub_env(monkeypatch):
    for key in list(__import__("os").environ):
        if key.upper().startswith("AGORA_HUB_"):
            monkeypatch.delenv(key)


def test_unknown_env_vars_are_named_with_the_closest_setting():
    env = {
        "AGORA_HUB_HEARTBEAT_TIMOUT": "3",
        "AGORA_HUB_TRUSTED_PROXY": "10.0.0.1",
        "agora_hub_rate_limt": "5",  # pydantic-settings reads names case-insensitively
        "AGORA_HUB_NO_SUCH_THING_AT_ALL": "1",
        "AGORA_HUB_PORT": "1",
        "AGORA_HUB_CONFIG": "hub.toml",
        "AGORA_HUBBLE": "1",
        "PATH": "/bin",
    }
    assert unknown_env_vars(env) == [
        "unknown environment variable AGORA_HUB_HEARTBEAT_TIMOUT is ignored; "
        "did you mean AGORA_HUB_HEARTBEAT_TIMEOUT?",
        "unknown environment variable AGORA_HUB_NO_SUCH_THING_AT_ALL is ignored",
        "unknown environment variable AGORA_HUB_TRUSTED_PROXY is ignored; "
        "did you mean AGORA_HUB_TRUSTED_PROXIES?",
        "unknown environment variable agora_hub_rate_limt is ignored; "
        "did you mean AGORA_HUB_RATE_LIMIT?",
    ]
    assert unknown_env_vars({"AGORA_HUB_LOG_LEVEL": "debug"}) == []
    # The client tools' own variables are known too.
    tools = {f"AGORA_HUB_{n}": "x" for n in ("URL", "AGENT_ID", "TOKEN", "TOKEN_FILE")}
    assert unknown_env_vars(tools) == []


def test_unknown_config_keys_stay_fatal_and_suggest_the_closest_name(tmp_path):
    config = tmp_path / "hub.toml"
    config.write_text('heartbeat_timout = 5\n[[spaces]]\nid = "lobby"\ncapacty = 3\nzzzz = 1\n')
    with pytest.raises(ConfigError) as info:
        load_settings(config_file=config)
    message = str(info.value)
    assert "heartbeat_timout: unknown setting; did you mean heartbeat_timeout?" in message
    assert "spaces.0.capacty: unknown setting; did you mean capacity?" in message
    assert "zzzz: unknown setting" in message
    assert "zzzz: unknown setting; did you mean" not in message  # nothing close


def test_bridge_tables_are_checked_by_their_adapters_with_suggestions(tmp_path):
    config = tmp_path / "hub.toml"
    config.write_text(
        "[bridges]\nagora_htp = []\nzzzz = []\n"
        '[[bridges.envelope]]\nspace = "lab"\nagent_id = "x"\nurl = "http://h/"\n'
        'protocl = "agora/1.0"\n'
    )
    settings = load_settings(config_file=config)  # each adapter checks its own tables
    with pytest.raises(ConfigError) as info:
        from_settings(settings)
    message = str(info.value)
    assert "bridges.agora_htp: unknown setting; did you mean agora_http?" in message
    assert "bridges.zzzz: unknown setting" in message
    assert "bridges.envelope.0.protocl: unknown setting; did you mean protocol?" in message
    assert "bridges.envelope.0.protocol: Field required" in message


def test_trusted_proxies_from_flag_env_and_file(tmp_path, monkeypatch):
    args = build_parser().parse_args(["serve", "--trusted-proxies", "10.0.0.0/8, 192.0.2.1"])
    assert settings_from_args(args).trusted_proxies == ["10.0.0.0/8", "192.0.2.1/32"]
    monkeypatch.setenv("AGORA_HUB_TRUSTED_PROXIES", "::1,127.0.0.1")
    assert load_settings().trusted_proxies == ["::1/128", "127.0.0.1/32"]
    monkeypatch.delenv("AGORA_HUB_TRUSTED_PROXIES")
    config = tmp_path / "hub.toml"
    config.write_text('trusted_proxies = ["172.16.0.0/12"]\n')
    assert load_settings(config_file=config).trusted_proxies == ["172.16.0.0/12"]
    assert load_settings().trusted_proxies == []  # default: trust no one
    with pytest.raises(ConfigError, match=r"trusted_proxies: .*'lb\.internal' is not an IP"):
        load_settings({"trusted_proxies": "10.0.0.1,lb.internal"})


@pytest.mark.parametrize(
    ("setting", "purpose"),
    [
        ("tls_certfile", "TLS certificate"),
        ("tls_keyfile", "TLS private key"),
        ("auth_tokens_file", "tokens"),
        ("identity_file", "identity key"),
    ],
)
def test_a_missing_file_names_the_setting_the_path_and_its_purpose(tmp_path, setting, purpose):
    present = tmp_path / "present.pem"
    present.write_text("x")
    overrides = {"tls_certfile": str(present), "tls_keyfile": str(present)}
    if setting == "auth_tokens_file":
        overrides = {"auth_mode": "tokens"}
    overrides[setting] = str(tmp_path / "missing.pem")
    settings = load_settings(overrides)  # reading the settings does not need the files
    with pytest.raises(ConfigError) as info:
        check_files(settings)
    message = str(info.value)
    assert message.startswith(f"{setting} {tmp_path / 'missing.pem'}: no such file")
    assert purpose in message
    overrides[setting] = str(tmp_path)
    with pytest.raises(ConfigError, match="not a file"):
        check_files(load_settings(overrides))


def test_reread_sees_the_file_again_and_flags_still_win(tmp_path):
    config = tmp_path / "hub.toml"
    config.write_text('log_level = "info"\nrate_limit = 10\n')
    settings = load_settings({"port": 9999}, config)
    config.write_text('log_level = "debug"\nrate_limit = 20\nport = 1\n')
    fresh = reread_settings(settings)
    assert fresh is not None
    assert (fresh.log_level, fresh.rate_limit, fresh.port) == ("debug", 20, 9999)
    assert restart_needed(settings, fresh) == ["rate_limit"]
    # The same holds for the copy a --workers child runs with.
    child = settings.model_copy(update={"workers": 1, "node_id": "n-w0"})
    assert reread_settings(child).log_level == "debug"
    assert restart_needed(child, fresh) == ["rate_limit"]

    config.write_text("log_level = 5\n")
    with pytest.raises(ConfigError, match="log_level"):
        reread_settings(settings)
    config.unlink()
    with pytest.raises(ConfigError, match="does not exist"):
        reread_settings(settings)
