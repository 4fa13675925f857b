from hub.core.ratelimit import TokenBucket, Verdict


def test_burst_then_refill():
    bucket = TokenBucket(rate=10, burst=5, abuse_seconds=5, now=0.0)
    assert [bucket.take(0.0) for _ in range(5)] == [Verdict.ALLOW] * 5
    assert bucket.take(0.0) is Verdict.LIMIT
    assert bucket.take(0.1) is Verdict.ALLOW  # one token back after 1/rate s
    assert bucket.take(0.1) is Verdict.LIMIT


def test_twice_the_rate_is_throttled_but_never_abuse():
    bucket = TokenBucket(rate=10, burst=10, abuse_seconds=1, now=0.0)
    verdicts = [bucket.take(i / 20) for i in range(20 * 60)]  # 20 msg/s for a minute
    assert Verdict.LIMIT in verdicts
    assert Verdict.ABUSE not in verdicts


def test_far_above_the_rate_becomes_abuse_within_seconds():
    bucket = TokenBucket(rate=10, burst=10, abuse_seconds=2, now=0.0)
    # 50 msg/s: 40 refused per second, 10 drained → over 20 points after ~0.7 s
    for i in range(50 * 10):
        if bucket.take(i / 50) is Verdict.ABUSE:
            assert 0.5 < i / 50 < 3.0
            return
    raise AssertionError("never flagged as abuse")


def test_a_burst_alone_never_closes():
    """Regression: a burst over the abuse allowance closed the connection at once."""
    bucket = TokenBucket(rate=5, burst=5, abuse_seconds=5, now=0.0)
    verdicts = [bucket.take(0.01) for _ in range(10_000)]
    assert verdicts[:5] == [Verdict.ALLOW] * 5
    assert set(verdicts[5:]) == {Verdict.LIMIT}
    # Back to the allowed rate afterwards: served again once tokens are back.
    assert [bucket.take(1.0 + i / 5) for i in range(1, 50)].count(Verdict.ABUSE) == 0


def test_abuse_needs_the_excess_sustained_over_wall_time():
    bucket = TokenBucket(rate=10, burst=10, abuse_seconds=2, now=0.0)
    first_refusal = None
    for i in range(100 * 10):  # 100 msg/s: ten times the rate
        t = i / 100
        verdict = bucket.take(t)
        if verdict is not Verdict.ALLOW and first_refusal is None:
            first_refusal = t
        if verdict is Verdict.ABUSE:
            assert first_refusal is not None
            assert 2.0 <= t - first_refusal < 2.1
            return
    raise AssertionError("never flagged as abuse")


def test_an_overshoot_ends_when_the_score_drains():
    bucket = TokenBucket(rate=10, burst=10, abuse_seconds=1, now=0.0)
    for _ in range(100):
        bucket.take(0.0)  # a burst: score full
    # Quiet for long enough to drain it, then another burst much later.
    assert bucket.take(5.0) is Verdict.ALLOW
    assert all(bucket.take(5.0) is not Verdict.ABUSE for _ in range(100))
