"""Properties over random payloads: sign → verify holds, and no edit to the
signed content survives (unicode, floats, integer-like keys, nesting)."""

from __future__ import annotations

from typing import Any

import orjson
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey

from protocol.envelope import EnvelopeError, Format, Reason, agora, detect, verify
from protocol.envelope import agentprotocol as ap
from protocol.envelope.canonical import jcs, js_canonical, reference
from protocol.identity import b64, b64_decode_strict, b64url, b64url_decode_strict

NOW = 1_767_225_600.0
KEY = SigningKey(b"\x21" * 32)
SAFE_INT = 2**53 - 1

keys = st.one_of(
    st.text(max_size=8),
    st.integers(0, 2**32).map(str),  # array indexes and the first non-index
    st.sampled_from(["0", "01", "-1", "1.5", "é", "\U0001f600", "\ue000", "\x7f", '"', "\\"]),
).filter(lambda k: k != "__proto__")
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-SAFE_INT, SAFE_INT),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=16),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=24,
)
payloads = st.dictionaries(keys, values, max_size=5)


def agora_envelope(data: dict[str, Any]) -> dict[str, Any]:
    return agora.build("STATUS", {"data": data}, signing_key=KEY, now=NOW)


def ap_message(data: dict[str, Any]) -> dict[str, Any]:
    return ap.build("notify", {"event": "e", "data": data}, signing_key=KEY, now=NOW, to="x")


def signed_content(doc: dict[str, Any]) -> tuple[bytes, str]:
    """What a signature covers, and the signature's own text."""
    if detect(doc) is Format.AGORA:
        return jcs(agora.signing_form(doc)), doc["sender"]["signature"]
    return js_canonical(ap.signing_form(doc)), doc["signature"]


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(payloads)
def test_sign_then_verify_holds_in_both_formats(data: dict[str, Any]) -> None:
    for doc in (agora_envelope(data), ap_message(data)):
        verify(doc, now=NOW)
        # and after a trip over the wire
        verify(orjson.loads(orjson.dumps(doc)), now=NOW)


@SETTINGS
@given(payloads, st.data())
def test_a_flipped_byte_fails_unless_the_signed_content_is_unchanged(
    data: dict[str, Any], draw: st.DataObject
) -> None:
    for doc in (agora_envelope(data), ap_message(data)):
        wire = bytearray(orjson.dumps(doc))
        i = draw.draw(st.integers(0, len(wire) - 1))
        wire[i] ^= 1 << draw.draw(st.integers(0, 7))
        try:
            edited = orjson.loads(bytes(wire))
        except orjson.JSONDecodeError:
            continue
        try:
            verify(edited, now=NOW)
        except EnvelopeError:
            continue
        # It verified: then the flip only touched how a value is written
        # (1e21 → 1E21), never a signed value, the signature or the key.
        assert signed_content(edited) == signed_content(doc)


@SETTINGS
@given(payloads, st.data())
def test_an_edited_payload_is_a_bad_signature(data: dict[str, Any], draw: st.DataObject) -> None:
    extra = draw.draw(st.text(min_size=1, max_size=4))
    for doc in (agora_envelope(data), ap_message(data)):
        doc["payload"]["event"] = str(doc["payload"].get("event", "")) + extra
        try:
            verify(doc, now=NOW)
        except EnvelopeError as exc:
            assert exc.reason is Reason.BAD_SIGNATURE
        else:
            raise AssertionError("an edited payload verified")


@SETTINGS
@given(st.integers(0, 63), st.integers(0, 7))
def test_any_flipped_signature_bit_is_a_bad_signature(index: int, bit: int) -> None:
    doc = agora_envelope({"k": 1})
    raw = bytearray(b64url_decode_strict(doc["sender"]["signature"]))
    raw[index] ^= 1 << bit
    doc["sender"]["signature"] = b64url(bytes(raw))
    msg = ap_message({"k": 1})
    raw = bytearray(b64_decode_strict(msg["signature"]))
    raw[index] ^= 1 << bit
    msg["signature"] = b64(bytes(raw))
    for edited in (doc, msg):
        try:
            verify(edited, now=NOW)
        except EnvelopeError as exc:
            assert exc.reason is Reason.BAD_SIGNATURE
        else:
            raise AssertionError("a flipped signature verified")


# ── the two encoders agree ──────────────────────────────────────────────────

wide_keys = st.one_of(
    keys,
    st.text(alphabet=st.characters(min_codepoint=0xD7F0, exclude_categories=["Cs"]), max_size=3),
)
wide_scalars = st.one_of(
    scalars,
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e-3, max_value=1e-3),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: abs(f) >= 1e15),
)
wide_values = st.recursive(
    wide_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(wide_keys, inner, max_size=4),
    max_leaves=24,
)


def _widened(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _widened(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_widened(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > SAFE_INT:
        return float(value)
    return value


@settings(max_examples=400, deadline=None)
@given(wide_values)
def test_canonical_bytes_match_the_rfc8785_package_and_the_reference_encoder(
    value: Any,
) -> None:
    assert jcs(value) == rfc8785.dumps(_widened(value)) == reference(value, js=False)
    assert js_canonical(value) == reference(value, js=True)
