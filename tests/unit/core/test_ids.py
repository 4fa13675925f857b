"""Event ids: unique, and unpredictable by whoever reads some of them (§18)."""

from __future__ import annotations

import itertools

from hub.core.ids import Ids


def test_event_ids_are_unique_across_refills_of_the_random_pool():
    ids = Ids()
    seen = {ids.event_id() for _ in range(20_000)}
    assert len(seen) == 20_000


def test_an_event_id_carries_64_random_bits_beyond_what_its_predecessor_shares():
    ids = Ids()
    made = [ids.event_id() for _ in range(3000)]
    for before, after in itertools.pairwise(made):
        shared = next(
            n for n, (a, b) in enumerate(zip(before + "$", after + "#", strict=False)) if a != b
        )
        assert len(after) - shared >= 16, (before, after)


def test_two_nodes_never_make_the_same_id():
    a, b = Ids(), Ids()
    assert a.tag != b.tag
    assert {a.event_id() for _ in range(100)}.isdisjoint(b.event_id() for _ in range(100))
