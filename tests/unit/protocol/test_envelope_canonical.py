"""Canonical bytes (RFC 8785 and the JS order of agentprotocol/0.1) and strict parsing."""

from __future__ import annotations

import orjson
import pytest

from protocol.envelope import MAX_DEPTH, EnvelopeError, Reason, parse_json
from protocol.envelope.canonical import array_index, jcs, js_canonical, js_key_order

# ── key order ───────────────────────────────────────────────────────────────


def test_integer_like_keys_come_first_in_numeric_order_in_js_only() -> None:
    obj = {"a": 1, "10": 2, "9": 3, "1": 4, "b": 5}
    assert js_canonical(obj) == b'{"1":4,"9":3,"10":2,"a":1,"b":5}'
    assert jcs(obj) == b'{"1":4,"10":2,"9":3,"a":1,"b":5}'


@pytest.mark.parametrize(
    ("key", "index"),
    [
        ("0", 0),
        ("7", 7),
        ("4294967294", 4294967294),  # the largest array index
        ("4294967295", None),  # 2**32 - 1 is not one
        ("01", None),
        ("-1", None),
        ("1.5", None),
        ("", None),
        ("١", None),  # Arabic-Indic digit one: isdigit() but not ASCII
        (" 1", None),
    ],
)
def test_array_index_keys(key: str, index: int | None) -> None:
    assert array_index(key) == index


def test_non_index_numeric_keys_sort_as_strings() -> None:
    keys = ["4294967295", "4294967294", "01", "2", "-1", "b"]
    assert js_key_order(keys) == ["2", "4294967294", "-1", "01", "4294967295", "b"]


def test_keys_sort_by_utf16_code_units_not_code_points() -> None:
    # U+1F600 is the surrogate pair D83D DE00, which sorts before U+E000 in
    # UTF-16 although its code point is larger: both canonical forms agree.
    obj = {"\ue000": 1, "\U0001f600": 2, "é": 3, "z": 4}
    expected = '{"z":4,"é":3,"\U0001f600":2,"\ue000":1}'.encode()
    assert jcs(obj) == expected
    assert js_canonical(obj) == expected


def test_nested_objects_and_arrays_are_sorted_recursively() -> None:
    obj = {"b": [{"y": 1, "x": 2}, []], "a": {"2": {}, "10": None}}
    assert js_canonical(obj) == b'{"a":{"2":{},"10":null},"b":[{"x":2,"y":1},[]]}'
    assert jcs(obj) == b'{"a":{"10":null,"2":{}},"b":[{"x":2,"y":1},[]]}'


def test_proto_key_is_refused_in_agentprotocol() -> None:
    with pytest.raises(EnvelopeError) as err:
        js_canonical({"a": {"__proto__": {"x": 1}}})
    assert err.value.reason is Reason.MALFORMED
    assert jcs({"__proto__": 1}) == b'{"__proto__":1}'  # plain data in RFC 8785


# ── numbers and strings ─────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-7, "1e-7"),
        (1e-6, "0.000001"),
        (0.1, "0.1"),
        (0.30000000000000004, "0.30000000000000004"),
        (-0.0, "0"),
        (1.0, "1"),
        (-1.5, "-1.5"),
        (123456789012, "123456789012"),
        (2**53 - 1, "9007199254740991"),
        (2**53 + 1, "9007199254740992"),  # what JSON.parse makes of it
        (12345678901234567890, "12345678901234567000"),
        (10**21, "1e+21"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
    ],
)
def test_numbers_print_as_javascript_does(value: float, text: str) -> None:
    assert js_canonical([value]) == f"[{text}]".encode()
    assert jcs([value]) == f"[{text}]".encode()


def test_numbers_from_orjson_print_the_same() -> None:
    parsed = orjson.loads(b"[1e21,1E-7,-0,-0.0,1.0,18446744073709551616,9007199254740993]")
    assert js_canonical(parsed) == b"[1e+21,1e-7,0,0,1,18446744073709552000,9007199254740992]"


def test_strings_escape_like_json_stringify() -> None:
    text = 'q"b\\s/\b\f\n\r\t\x00\x1f\x7f é \u2028 \U0001f600'
    expected = '"q\\"b\\\\s/\\b\\f\\n\\r\\t\\u0000\\u001f\x7f é \u2028 \U0001f600"'
    assert js_canonical(text) == expected.encode()
    assert jcs(text) == expected.encode()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_malformed(value: float) -> None:
    for canon in (jcs, js_canonical):
        with pytest.raises(EnvelopeError) as err:
            canon({"x": [value]})
        assert err.value.reason is Reason.MALFORMED


def test_an_integer_beyond_any_double_is_malformed() -> None:
    for canon in (jcs, js_canonical):
        with pytest.raises(EnvelopeError) as err:
            canon({"x": 10**400})
        assert err.value.reason is Reason.MALFORMED


@pytest.mark.parametrize(
    "bad", [{1: "x"}, {"x": b"bytes"}, {"x": {1, 2}}, {"x": "\ud800"}, {"\udfff": 1}]
)
def test_values_json_cannot_carry_are_malformed(bad: object) -> None:
    for canon in (jcs, js_canonical):
        with pytest.raises(EnvelopeError) as err:
            canon(bad)
        assert err.value.reason is Reason.MALFORMED


# ── limits ──────────────────────────────────────────────────────────────────


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_nesting_is_bounded() -> None:
    assert js_canonical(nested(MAX_DEPTH)) == b"[" * MAX_DEPTH + b"1" + b"]" * MAX_DEPTH
    for canon in (jcs, js_canonical):
        with pytest.raises(EnvelopeError) as err:
            canon(nested(MAX_DEPTH + 1))
        assert err.value.reason is Reason.TOO_LARGE


def test_size_is_bounded_before_and_after_serialising() -> None:
    big = {"x": "a" * (10 * 1024 * 1024)}  # 10 MB: refused by the early estimate
    for canon in (jcs, js_canonical):
        with pytest.raises(EnvelopeError) as err:
            canon(big)
        assert err.value.reason is Reason.TOO_LARGE
    # Escapes make the output bigger than the estimate: the exact check catches it.
    escaped = {"x": "\x00" * 400}
    assert len(jcs(escaped)) > 2000
    with pytest.raises(EnvelopeError):
        jcs(escaped, max_bytes=1000)
    with pytest.raises(EnvelopeError):
        js_canonical(escaped, max_bytes=1000)


# ── parse_json ──────────────────────────────────────────────────────────────


def test_parse_json_accepts_an_object() -> None:
    assert parse_json(b'{"a": [1, 2.5, "\\u00e9"]}') == {"a": [1, 2.5, "é"]}
    assert parse_json('{"a": null}') == {"a": None}


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"a": 1, "a": 2}', Reason.MALFORMED),
        (b'{"a": {"b": 1, "b": 1}}', Reason.MALFORMED),
        (b'{"a": NaN}', Reason.MALFORMED),
        (b'{"a": Infinity}', Reason.MALFORMED),
        (b'{"a": -Infinity}', Reason.MALFORMED),
        (b"[1, 2]", Reason.MALFORMED),
        (b'"text"', Reason.MALFORMED),
        (b"not json", Reason.MALFORMED),
        (b"", Reason.MALFORMED),
        (b'{"a": "\xff"}', Reason.MALFORMED),
        (b'{"a": ' + b"9" * 5000 + b"}", Reason.MALFORMED),
        (b"[" * 100_000 + b"]" * 100_000, Reason.TOO_LARGE),
        (b'{"a": "' + b"x" * (10 * 1024 * 1024) + b'"}', Reason.TOO_LARGE),
    ],
    ids=[
        "duplicate",
        "nested-duplicate",
        "nan",
        "inf",
        "-inf",
        "array",
        "string",
        "garbage",
        "empty",
        "bad-utf8",
        "huge-int",
        "deep",
        "10MB",
    ],
)
def test_parse_json_refuses(raw: bytes, reason: Reason) -> None:
    with pytest.raises(EnvelopeError) as err:
        parse_json(raw)
    assert err.value.reason is reason


def test_parse_json_keeps_a_lone_surrogate_for_verify_to_refuse() -> None:
    doc = parse_json(b'{"a": "\\ud800"}')
    with pytest.raises(EnvelopeError):
        jcs(doc)
