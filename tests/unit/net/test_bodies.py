"""hub.net.bodies: JSON bodies checked as frames are, waiting slots, and the HTTP
port's fixed words for requests it cannot parse."""

from __future__ import annotations

import pytest
from aiohttp.http_exceptions import BadStatusLine, InvalidHeader, LineTooLong

from hub.config.settings import Settings
from hub.net.bodies import MAX_DEPTH, BodyRefused, SlotsFull, WaitingSlots, parse_json
from hub.net.http_guard import HttpDeadlines, describe_parse_error


def nested(depth: int) -> bytes:
    return b'{"a":' * (depth - 1) + b"[]" + b"}" * (depth - 1)


@pytest.mark.parametrize("nesting", [0, 1, 2])
def test_json_as_deep_as_an_event_may_carry_is_accepted_one_more_is_400(nesting):
    limit = MAX_DEPTH - nesting
    assert parse_json(nested(limit), nesting=nesting) is not None
    for depth in (limit + 1, limit + 2, 254, 255, 1023, 1024, 1025, 5000):
        with pytest.raises(BodyRefused) as refused:
            parse_json(nested(depth), nesting=nesting)
        assert refused.value.status == 400
        assert refused.value.message.startswith(f"JSON nested deeper than {limit} levels")


def test_unterminated_deep_input_is_refused_for_its_depth():
    with pytest.raises(BodyRefused, match="nested deeper than 64"):
        parse_json(b"[" * 100_000)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"not json", "malformed JSON"),
        (b"", "malformed JSON"),
        (b'{"a": "\xff"}', "malformed JSON"),
        (b'{"a": NaN}', "malformed JSON"),
        (b'{"n": 18446744073709551616}', "does not fit in 64 bits"),
    ],
)
def test_what_an_event_could_not_carry_is_400(raw, message):
    with pytest.raises(BodyRefused) as refused:
        parse_json(raw)
    assert refused.value.status == 400 and message in str(refused.value)


def test_waiting_slots_are_bounded_and_given_back():
    slots = WaitingSlots(2)
    with slots.hold(), slots.hold():
        assert slots.taken == 2
        with pytest.raises(SlotsFull), slots.hold():
            pass
    assert slots.taken == 0
    with pytest.raises(RuntimeError), slots.hold():
        raise RuntimeError("the wait failed")
    assert slots.taken == 0


def test_parse_errors_are_described_in_fixed_words():
    secret = "apikey-SECRET-0123456789"
    for exc, words in (
        (LineTooLong(f"X-API-Key: {secret}".encode(), 8190), "too long"),
        (InvalidHeader(f"X-API-Key: {secret}\x01"), "invalid header"),
        (BadStatusLine(f"GET /{secret}"), "invalid request line"),
        (ValueError(secret), "malformed request"),
        (None, "malformed request"),
    ):
        described = describe_parse_error(exc)
        assert words in described and secret not in described


def test_deadlines_come_from_the_settings():
    s = Settings(
        http_header_timeout=1.5,
        http_body_timeout=2.5,
        http_body_min_rate=100,
        http_keepalive_timeout=9,
    )
    assert HttpDeadlines.from_settings(s) == HttpDeadlines(1.5, 2.5, 100, 9.0)
    defaults = HttpDeadlines.from_settings(Settings())
    assert defaults == HttpDeadlines()
    assert (defaults.header_timeout, defaults.body_timeout) == (10.0, 10.0)
