from hub.ratelimit import TokenBucket, Verdict


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
