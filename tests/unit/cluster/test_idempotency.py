"""Idempotency keys: scoping, the digest that tells a retry from a reused key,
and the memory backplane's bounded, expiring store (:class:`OnceCache`).

That a retry is answered and not published again, on one backplane and across
two, is the history contract's (tests/contract/test_history_contract.py) and
publishing's (tests/unit/handlers/test_publishing.py); this is the module itself.
"""

from __future__ import annotations

from hub.cluster.backplane import Duplicate, Once
from hub.cluster.backplane.idempotency import OnceCache, digest, once, receipt, redis_key
from protocol.names import is_valid_agent_id


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def key(name: str, event_id: str = "evt-1", ts: int = 1234, dg: str = "d1") -> Once:
    return Once(f"alice\n{name}", event_id, ts, dg)


def test_a_stored_key_answers_with_the_originals_ids() -> None:
    cache = OnceCache(ttl=60, clock=Clock())
    assert cache.get("room", "alice\nk") is None
    cache.put("room", "alice\nk", 7, key("k", "evt-7", 555, "abc"))
    found = cache.get("room", "alice\nk")
    assert isinstance(found, Duplicate) and found == 7
    assert (found.event_id, found.timestamp, found.digest) == ("evt-7", 555, "abc")


def test_keys_are_scoped_to_the_space_and_the_agent() -> None:
    cache = OnceCache(ttl=60, clock=Clock())
    cache.put("room", once("alice", "k", "e1", 1, {}).key, 1, once("alice", "k", "e1", 1, {}))
    assert cache.get("lab", once("alice", "k", "e", 1, {}).key) is None, "another space"
    assert cache.get("room", once("bob", "k", "e", 1, {}).key) is None, "another agent"
    assert cache.get("room", once("alice", "k", "e", 1, {}).key) == 1


def test_the_scope_cannot_be_forged_by_the_key() -> None:
    # "alice" + key "b\nk" could only meet agent "alice\nb" + key "k", and an
    # agent id cannot hold a newline.
    assert once("alice", "b\nk", "e", 1, {}).key == "alice\nb\nk"
    assert not is_valid_agent_id("alice\nb")


def test_keys_expire_after_the_ttl() -> None:
    clock = Clock()
    cache = OnceCache(ttl=60, clock=clock)
    cache.put("room", "k1", 1, key("k1"))
    clock.now += 30
    cache.put("room", "k2", 2, key("k2"))
    clock.now += 29.9
    assert cache.get("room", "k1") == 1
    clock.now += 0.2  # k1 is 60.1 s old, k2 30.1 s
    assert cache.get("room", "k1") is None
    assert cache.get("room", "k2") == 2
    assert len(cache) == 1, "expired entries are dropped, not just hidden"
    clock.now += 30
    assert cache.get("room", "k2") is None and len(cache) == 0


def test_the_store_is_bounded_and_forgets_the_oldest_first() -> None:
    cache = OnceCache(ttl=60, max_entries=3, clock=Clock())
    for n in range(1, 5):
        cache.put("room", f"k{n}", n, key(f"k{n}"))
    assert len(cache) == 3
    assert cache.get("room", "k1") is None
    assert [cache.get("room", f"k{n}") for n in (2, 3, 4)] == [2, 3, 4]


def test_a_key_stored_again_is_young_again() -> None:
    clock = Clock()
    cache = OnceCache(ttl=60, max_entries=2, clock=clock)
    cache.put("room", "a", 1, key("a"))
    cache.put("room", "b", 2, key("b"))
    clock.now += 50
    cache.put("room", "a", 3, key("a"))  # now the newest
    cache.put("room", "c", 4, key("c"))  # over the bound: b goes, not a
    assert cache.get("room", "b") is None
    assert cache.get("room", "a") == 3
    clock.now += 20  # b would have expired; a (stored again 20 s ago) has not
    assert cache.get("room", "a") == 3


def test_the_digest_is_of_what_was_sent_in_any_key_order() -> None:
    assert digest([{"a": 1, "b": [1, 2]}, None]) == digest([{"b": [1, 2], "a": 1}, None])
    assert digest([{"a": 1}, None]) != digest([{"a": 2}, None])
    assert digest([{"a": 1}, None]) != digest([{"a": 1}, "bob"]), "recipients count"
    made = once("alice", "k", "evt-9", 77, [{"a": 1}, None])
    assert (made.event_id, made.timestamp) == ("evt-9", 77)
    assert made.digest == digest([{"a": 1}, None])


def test_the_redis_receipt_parses_back_into_the_duplicate() -> None:
    made = once("alice", "k", "evt-9 with space", 77, {"x": 1})
    stored = b"42 " + receipt(made)  # the script puts the seq in front
    parsed = Duplicate.parse(stored)
    assert parsed == 42
    assert (parsed.event_id, parsed.timestamp, parsed.digest) == (
        "evt-9 with space",
        77,
        made.digest,
    )


def test_redis_keys_are_short_and_distinct_whatever_the_key() -> None:
    long_key = once("alice", "k" * 10_000, "e", 1, {}).key
    a = redis_key("agora", "room", long_key)
    assert len(a) < 100 and a.startswith("agora:once:room:")
    assert a != redis_key("agora", "room", once("alice", "k" * 9_999, "e", 1, {}).key)
    assert a != redis_key("agora", "lab", long_key)
    assert a == redis_key("agora", "room", long_key)
