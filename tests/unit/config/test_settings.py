import pytest

from hub.config.settings import FILE_ONLY, Settings, load_settings
from hub.errors import ConfigError
from hub.process.cli import build_parser, settings_from_args


def test_defaults_match_the_contract(monkeypatch):
    for key in list(__import__("os").environ):
        if key.startswith("AGORA_HUB_"):
            monkeypatch.delenv(key)
    s = load_settings()
    assert (s.host, s.port, s.redis_url) == ("127.0.0.1", 8765, None)
    assert (s.heartbeat_interval, s.heartbeat_timeout) == (30, 60)
    assert (s.max_frame_bytes, s.outbox_max_bytes) == (1_048_576, 4_194_304)
    assert (s.rate_limit, s.rate_burst, s.space_capacity, s.members_list_limit) == (
        100,
        200,
        10_000,
        100,
    )
    assert s.member_events_limit == 1000
    assert (s.stream_threshold, s.stream_chunk, s.stream_idle_timeout) == (65536, 16384, 30)
    assert (s.auth_mode, s.compression, s.auto_create_spaces) == ("none", "none", True)
    assert s.max_streams_per_agent == 16 and s.shutdown_timeout == 10


def test_precedence_flag_over_env_over_file(tmp_path, monkeypatch):
    config = tmp_path / "hub.toml"
    config.write_text('port = 1111\nrate_limit = 5\nspace_capacity = 7\n[[spaces]]\nid = "lobby"\n')
    monkeypatch.setenv("AGORA_HUB_PORT", "2222")
    monkeypatch.setenv("AGORA_HUB_RATE_LIMIT", "6")
    args = build_parser().parse_args(
        ["serve", "--config", str(config), "--port", "3333", "--no-auto-create-spaces"]
    )
    s = settings_from_args(args)
    assert s.port == 3333  # flag
    assert s.rate_limit == 6  # env beats file
    assert s.space_capacity == 7  # file beats default
    assert s.auto_create_spaces is False
    assert [d.id for d in s.spaces] == ["lobby"]


def test_every_setting_is_a_flag():
    parser = build_parser()
    serve = parser._subparsers._group_actions[0].choices["serve"]
    flags = {opt for action in serve._actions for opt in action.option_strings}
    for name in Settings.model_fields:
        if name in FILE_ONLY:
            continue
        assert "--" + name.replace("_", "-") in flags, name


def test_serve_help_shows_real_defaults_only():
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]
    helps = {a.dest: a.help for a in serve._actions}
    assert "(default 8765)" in helps["port"]
    # node_id's default is computed at start: the help names none.
    assert "default" not in helps["node_id"]
    assert not any("Undefined" in (text or "") for text in helps.values())


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"heartbeat_interval": 10, "heartbeat_timeout": 5}, "heartbeat_timeout"),
        ({"port": 70000}, "port"),
        ({"tls_certfile": "/x.pem"}, "tls"),
        ({"workers": 2}, "redis_url"),
        ({"compression": "gzip"}, "compression"),
        ({"stream_chunk": 2}, "stream_chunk"),
        ({"listen_backlog": 0}, "listen_backlog"),
        ({"listen_backlog": 70000}, "listen_backlog"),
        ({"listen_backlog": "many"}, "listen_backlog"),
        # A prompt reader would be closed 4008 by one big event (outside audit).
        ({"outbox_max_bytes": 262_144}, "twice max_frame_bytes"),
        ({"max_frame_bytes": 4_194_304}, "twice max_frame_bytes"),
        ({"api_key": " " * 16}, "api_key"),  # nothing but whitespace (an outside audit)
        ({"admin_token": "short-token\n\n\n\n\n\n"}, "admin_token"),
    ],
)
def test_invalid_settings_are_clear_errors(overrides, fragment):
    with pytest.raises(ConfigError) as info:
        load_settings(overrides)
    assert fragment in str(info.value)


def test_bad_config_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(config_file=tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("port = [")
    with pytest.raises(ConfigError):
        load_settings(config_file=bad)
    typo = tmp_path / "typo.toml"
    typo.write_text("prot = 1\n")
    with pytest.raises(ConfigError, match="prot"):
        load_settings(config_file=typo)
    system = tmp_path / "system.toml"
    system.write_text('[[spaces]]\nid = "agent.mine"\n')
    with pytest.raises(ConfigError, match="user space"):
        load_settings(config_file=system)


def test_a_secret_read_from_a_file_loses_its_newline(monkeypatch):
    """HTTP drops whitespace around a header's value: a key kept with its
    file's newline could never be presented (found by an outside audit)."""
    monkeypatch.setenv("AGORA_HUB_API_KEY", "k" * 20 + "\n")
    s = load_settings({"admin_token": "  " + "t" * 16 + " "})
    assert s.api_key is not None and s.api_key.get_secret_value() == "k" * 20
    assert s.admin_token is not None and s.admin_token.get_secret_value() == "t" * 16
