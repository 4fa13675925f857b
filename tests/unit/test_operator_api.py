"""Pure parts of the server API and the status page: secrets and sessions,
the histograms, the node-stats reporter's rates, and the settings."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest

from hub.cluster.nodestats import MemoryNodeStats
from hub.config.settings import load_settings
from hub.core.counters import Counters, Histogram, HttpStats
from hub.errors import ConfigError
from hub.ops.api.auth import AdminSessions, Secret
from hub.ops.api.stats import MAX_SPACE_RATES, NodeReadings, NodeStatsReporter, parse_documents

TOKEN = "admin-token-0123456789"


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_secret_matches_only_itself():
    secret = Secret(TOKEN)
    assert secret.matches(TOKEN)
    for other in (None, "", TOKEN[:-1], TOKEN + " ", TOKEN.upper(), "\udcff" + TOKEN):
        assert not secret.matches(other), other


def test_sessions_are_signed_with_the_token_and_expire():
    clock = Clock()
    sessions = AdminSessions(Secret(TOKEN), lifetime=60, clock=clock)
    cookie = sessions.issue()
    assert TOKEN not in cookie and sessions.valid(cookie)
    expires, _, mac = cookie.partition(".")
    # Another token's sessions (or a changed token) are not accepted.
    assert not AdminSessions(Secret(TOKEN + "x"), clock=clock).valid(cookie)
    # Tampering with the expiry or the MAC spoils it.
    assert not sessions.valid(f"{int(expires) + 3600}.{mac}")
    assert not sessions.valid(f"{expires}.{mac[:-1]}0")
    for junk in (None, "", ".", "abc.def", f"-{expires}.{mac}", "9" * 40 + "." + mac):
        assert not sessions.valid(junk), junk
    clock.now += 59
    assert sessions.valid(cookie)
    clock.now += 2
    assert not sessions.valid(cookie)


def test_histogram_buckets_are_cumulative_with_le_semantics():
    h = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 1.0, 7.0, -3.0):
        h.observe(value)
    assert h.buckets() == [("0.1", 3), ("1.0", 5), ("+Inf", 6)]
    assert h.count == 6 and h.total == pytest.approx(8.65)


def test_http_stats_keep_their_labels_few():
    stats = HttpStats()
    stats.observe("/api/publish", "POST", 200, 0.01)
    stats.observe("/api/publish", "BREW", 405, 0.01)
    stats.observe("unmatched", "GET", 404, 0.001)
    assert stats.requests == Counter(
        {
            ("/api/publish", "POST", "200"): 1,
            ("/api/publish", "other", "405"): 1,
            ("unmatched", "GET", "404"): 1,
        }
    )
    assert stats.durations["/api/publish"].count == 2


async def test_the_reporter_turns_counters_into_rates():
    clock = Clock(100.0)
    counters = Counters()
    events: Counter[str] = Counter()

    def take() -> dict[str, int]:
        nonlocal events
        taken, events = events, Counter()
        return dict(taken)

    readings = NodeReadings(lambda: 3, lambda: 2, lambda: True, lambda: 0.004, take)
    store = MemoryNodeStats(clock=clock)
    reporter = NodeStatsReporter("n1", "9.9", counters, readings, store, clock=clock)
    first = reporter.document()
    assert first["deliveries_per_s"] == 0.0 and first["connections"] == 3
    counters.deliveries += 500
    counters.messages_in += 20
    counters.published += 10
    events.update({"busy": 40, "quiet": 2})
    for i in range(MAX_SPACE_RATES + 5):
        events[f"s{i}"] += 1
    clock.now += 2.0
    doc = reporter.document()
    assert doc["deliveries_per_s"] == 250.0 and doc["messages_in_per_s"] == 10.0
    assert doc["published_per_s"] == 5.0 and doc["backplane_lag"] == 0.004
    assert doc["space_rates"]["busy"] == 20.0 and doc["space_rates"]["quiet"] == 1.0
    assert len(doc["space_rates"]) == MAX_SPACE_RATES
    await reporter.report()
    (node,) = parse_documents(await store.read_all())
    assert node["id"] == "n1" and node["version"] == "9.9" and node["spaces"] == 2
    await reporter.aclose()
    assert await store.read_all() == {}


def test_unreadable_documents_are_skipped():
    raw = {"b": orjson.dumps({"connections": 1}), "a": b"{not json", "c": b"[1]"}
    assert parse_documents(raw) == [{"connections": 1, "id": "b"}]


def test_operator_settings(monkeypatch):
    for name in ("api_key", "admin_token"):
        with pytest.raises(ConfigError, match=f"{name} must be at least 16") as err:
            load_settings({name: "short-secret"})
        assert "short-secret" not in str(err.value)
    with pytest.raises(ConfigError, match="api_services needs api_key"):
        load_settings({"api_services": "billing"})
    with pytest.raises(ConfigError, match="service name"):
        load_settings({"api_key": TOKEN, "api_services": "bad name!"})
    monkeypatch.setenv("AGORA_HUB_API_KEY", TOKEN)
    monkeypatch.setenv("AGORA_HUB_API_SERVICES", "billing, deployer")
    monkeypatch.setenv("AGORA_HUB_ADMIN_TOKEN", TOKEN[::-1])
    s = load_settings()
    assert s.api_services == ["billing", "deployer"]
    assert s.api_key is not None and s.api_key.get_secret_value() == TOKEN
    assert TOKEN not in repr(s)
