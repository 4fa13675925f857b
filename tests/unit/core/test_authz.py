"""The authorization policy: grants from credentials, declared-space rules, glob
semantics, system spaces, trusted grants — the one answer every face asks for."""

import fnmatch
from dataclasses import dataclass, replace

import pytest

from hub.config.settings import DeclaredSpace, load_settings
from hub.core.authz import (
    MAX_PATTERN_LENGTH,
    MAX_PATTERNS,
    Act,
    Globs,
    Grant,
    Refusal,
    SpacePolicy,
    SpaceRules,
    parse_patterns,
    space_rules,
)
from hub.errors import ConfigError


@dataclass(frozen=True)
class Who:
    agent_id: str
    grant: Grant


def may_join(grant: Grant, space: str, agent_id: str, rules: dict[str, SpaceRules]) -> bool:
    return SpacePolicy(rules).may_read(Who(agent_id, grant), space)


def may_publish(grant: Grant, space: str, agent_id: str, rules: dict[str, SpaceRules]) -> bool:
    return SpacePolicy(rules).may_publish(Who(agent_id, grant), space)


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("task.*", "task.a", True),
        ("task.*", "task.a.b", True),  # * crosses dots
        ("task.*", "task", False),
        ("task.*", "Task.a", False),  # case-sensitive
        ("lobby", "lobby", True),
        ("lobby", "lobby2", False),
        ("team-?", "team-a", True),
        ("team-?", "team-ab", False),
        ("[ab]*", "alpha", True),
        ("[!ab]*", "alpha", False),
        ("*", "agent.status", True),
        ("bot-*", "bot-1\nx", True),  # fnmatch's (?s): newline is just a character
    ],
)
def test_globs_follow_fnmatchcase(pattern, name, expected):
    assert Globs([pattern]).matches(name) is expected
    assert fnmatch.fnmatchcase(name, pattern) is expected


def test_globs_match_any_pattern_and_empty_list_matches_nothing():
    globs = Globs(["lobby", "task.*", "team-?"])
    assert [globs.matches(n) for n in ("lobby", "task.x", "team-1", "teams", "other")] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert not Globs([]).matches("lobby")
    assert not Globs([]).matches("")


def test_grant_unrestricted_allows_everything_without_rules_but_system_publishes():
    for space in ("lobby", "task.x", "agent.status"):
        assert may_join(Grant.unrestricted, space, "alice", {})
    for space in ("lobby", "task.x"):
        assert may_publish(Grant.unrestricted, space, "alice", {})
    assert Grant.unrestricted == Grant()
    assert Grant.unrestricted.expires_at is None


def test_system_spaces_are_read_only_for_everyone_the_hub_included():
    policy = SpacePolicy(_rules({"id": "ops", "allow_join": ["ops-*"]}))
    for grant in (Grant.unrestricted, Grant.hub, Grant(publish=("*",))):
        who = Who("alice", grant)
        for space in ("agent.status", "mcp.calls", "file.x"):
            assert policy.refusal(who, Act.PUBLISH, space) is Refusal.SYSTEM_SPACE
            assert policy.may_read(who, space)


def test_a_trusted_grant_is_not_restricted_by_claims_or_rules():
    rules = _rules({"id": "ops", "allow_join": ["ops-*"], "allow_publish": []})
    policy = SpacePolicy(rules)
    hub = Who("mcp", Grant.hub)
    assert policy.may_read(hub, "ops") and policy.may_publish(hub, "ops")
    assert not policy.restricts(Grant.hub)
    assert policy.ruled_out(hub) == []
    outsider = Who("alice", Grant.unrestricted)
    assert policy.refusal(outsider, Act.READ, "ops") is Refusal.SPACE_RULES
    assert policy.ruled_out(outsider) == ["ops"]
    limited = Who("ops-1", Grant(join=("lobby",)))
    assert policy.refusal(limited, Act.READ, "ops") is Refusal.CLAIMS
    assert policy.ruled_out(limited) == []  # the rules let it in: its claims do not
    assert policy.readable(limited, ["ops", "lobby", "x"]) == ["lobby"]


def test_restricts_is_the_sessions_fast_path():
    assert not SpacePolicy().restricts(Grant.unrestricted)
    assert SpacePolicy().restricts(Grant(join=("a",)))
    assert SpacePolicy().restricts(Grant(publish=()))
    ruled = SpacePolicy(_rules({"id": "ops", "allow_publish": ["x"]}))
    assert ruled.restricts(Grant.unrestricted) and not ruled.restricts(Grant.hub)


def test_grant_restricts_join_and_publish_independently():
    grant = Grant(join=("task.*", "lobby"), publish=("task.ci.*",), expires_at=123.0)
    assert may_join(grant, "lobby", "bot", {})
    assert may_join(grant, "task.ci.build", "bot", {})
    assert not may_join(grant, "general", "bot", {})
    # System spaces are spaces: a restricted grant must name them to observe them.
    assert not may_join(grant, "agent.status", "bot", {})
    assert may_publish(grant, "task.ci.build", "bot", {})
    assert not may_publish(grant, "lobby", "bot", {})
    assert not may_publish(grant, "task.review", "bot", {})


def test_empty_claim_lists_allow_nothing():
    grant = Grant(join=(), publish=())
    assert not may_join(grant, "lobby", "bot", {})
    assert not may_publish(grant, "lobby", "bot", {})


def test_grant_equality_ignores_compiled_patterns_and_replace_recompiles():
    a = Grant(join=("a*",))
    assert a == Grant(join=("a*",))
    assert a != Grant(join=("b*",))
    b = replace(a, join=("b*",))
    assert may_join(b, "beta", "x", {}) and not may_join(b, "alpha", "x", {})
    assert "_join" not in repr(a)


def _rules(*spaces):
    return space_rules([DeclaredSpace(**s) for s in spaces])


def test_declared_space_rules_restrict_agent_ids():
    rules = _rules(
        {"id": "ops", "allow_join": ["ops-*", "admin"], "allow_publish": ["admin"]},
        {"id": "announcements", "allow_publish": ["hub-bot"]},
        {"id": "lobby"},  # no rules: left out of the table
    )
    assert set(rules) == {"ops", "announcements"}
    g = Grant.unrestricted
    assert may_join(g, "ops", "ops-1", rules) and may_join(g, "ops", "admin", rules)
    assert not may_join(g, "ops", "alice", rules)
    assert may_publish(g, "ops", "admin", rules)
    assert not may_publish(g, "ops", "ops-1", rules)
    # allow_publish alone leaves joining open.
    assert may_join(g, "announcements", "alice", rules)
    assert not may_publish(g, "announcements", "alice", rules)
    assert may_publish(g, "announcements", "hub-bot", rules)
    # Spaces without rules, declared or not, are open.
    for space in ("lobby", "general"):
        assert may_join(g, space, "alice", rules) and may_publish(g, space, "alice", rules)


def test_grant_and_space_rules_must_both_allow():
    rules = _rules({"id": "ops", "allow_join": ["ops-*"], "allow_publish": ["ops-*"]})
    grant = Grant(join=("ops", "lobby"), publish=("lobby",))
    assert may_join(grant, "ops", "ops-1", rules)
    assert not may_join(grant, "ops", "alice", rules)  # the space refuses
    assert not may_join(grant, "general", "ops-1", {})  # the grant refuses
    assert not may_publish(grant, "ops", "ops-1", rules)  # grant lacks ops
    assert may_publish(grant, "lobby", "ops-1", rules)


def test_publishing_needs_reading_too():
    """Gateways publish for callers that are not members: who may not join a
    space may not publish there either, whatever its publish claims say."""
    rules = _rules({"id": "vault", "allow_join": ["keeper"]})
    assert not may_publish(Grant.unrestricted, "vault", "outsider", rules)
    assert may_publish(Grant.unrestricted, "vault", "keeper", rules)
    assert not may_publish(Grant(join=("a",), publish=("b",)), "b", "x", {})
    policy = SpacePolicy(rules)
    assert policy.refusal(Who("outsider", Grant.unrestricted), Act.PUBLISH, "vault") is (
        Refusal.SPACE_RULES
    )


def test_only_credentials_that_keep_a_holder_to_some_spaces_hide_what_names_none():
    policy = SpacePolicy({"secret": SpaceRules(allow_join=Globs(["keeper"]))})
    assert policy.may_read_spaceless(Who("anyone", Grant.unrestricted))
    assert policy.may_read_spaceless(Who("mallory", Grant())), "a rule names its space only"
    assert policy.may_read_spaceless(Who("mcp", Grant(join=("a",), trusted=True)))
    assert not policy.may_read_spaceless(Who("scoped", Grant(join=("open", "mcp.calls"))))
    assert not policy.may_read_spaceless(Who("none", Grant(join=())))


def test_space_rules_come_from_the_config_file(tmp_path):
    config = tmp_path / "hub.toml"
    config.write_text(
        '[[spaces]]\nid = "ops"\nallow_join = ["ops-*"]\n\n'
        '[[spaces]]\nid = "lobby"\nallow_publish = []\n'
    )
    settings = load_settings(config_file=config)
    rules = space_rules(settings.spaces)
    assert may_join(Grant.unrestricted, "ops", "ops-7", rules)
    assert not may_join(Grant.unrestricted, "ops", "alice", rules)
    assert may_join(Grant.unrestricted, "lobby", "alice", rules)
    assert not may_publish(Grant.unrestricted, "lobby", "alice", rules)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ops-*", "must be a list of strings"),
        (["ok", 3], "must be a list of strings"),
        ([""], "1–256 characters"),
        (["x" * (MAX_PATTERN_LENGTH + 1)], "1–256 characters"),
        (["p"] * (MAX_PATTERNS + 1), f"more than {MAX_PATTERNS}"),
    ],
)
def test_bad_pattern_lists_are_refused(tmp_path, value, message):
    with pytest.raises(ValueError, match=message):
        parse_patterns(value, "allow_join")
    config = tmp_path / "hub.toml"
    config.write_text(f'[[spaces]]\nid = "ops"\nallow_join = {_toml(value)}\n')
    with pytest.raises(ConfigError, match="allow_join"):
        load_settings(config_file=config)


def test_pattern_limits_are_inclusive():
    assert len(parse_patterns(["p"] * MAX_PATTERNS, "join")) == MAX_PATTERNS
    assert parse_patterns(["x" * MAX_PATTERN_LENGTH], "join") == ("x" * MAX_PATTERN_LENGTH,)


def _toml(value):
    if isinstance(value, str):
        return f'"{value}"'
    return "[" + ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in value) + "]"
