"""The bytes that get signed: RFC 8785 for agora/1.0, JS order for agentprotocol/0.1.

Both formats print numbers and strings the way ECMAScript does
(``Number::toString``, ``JSON.stringify`` escapes), which is also what RFC
8785 prescribes. Only the key order differs:

- RFC 8785 sorts every object's keys by their UTF-16 code units.
- agentprotocol/0.1 builds each object with ``Object.keys(o).sort()`` and
  lets ``JSON.stringify`` print it. A JS object always lists *array-index*
  keys ("0" … "4294967294", no leading zeros) first, in numeric order, so
  ``{"10","9","a"}`` prints as ``9, 10, a`` — not the ``10, 9, a`` that
  sorting alone gives.

Input is what a JSON parser produced (orjson in the hub, :func:`parse_json`
for raw bodies). Integers beyond ±(2**53 - 1) are printed as the double a
JavaScript peer would have parsed them into; NaN, infinities, non-string
keys, lone surrogates and nesting deeper than :data:`MAX_DEPTH` are refused.

Two encoders produce the same bytes. The *reference* one prints every
scalar with the ``rfc8785`` package. The *fast* one (several times quicker)
copies the tree with its keys in canonical order and hands it to the C JSON
encoder, whose string escapes are RFC 8785's and whose float ``repr`` is
ECMAScript's text except for exponents and integral values; integral floats
become ints, and any value it would print differently (an exponent, an
integer beyond 2**53) sends the whole envelope to the reference encoder.
The unit tests check that both agree on random input.
"""

from __future__ import annotations

import json
import math
from typing import Any

import rfc8785

from protocol.envelope.errors import EnvelopeError, Reason, malformed

MAX_DEPTH = 64
MAX_ENVELOPE_BYTES = 1024 * 1024
_MAX_SAFE_INT = 2**53 - 1
_MAX_ARRAY_INDEX = 2**32 - 2
_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, check_circular=False, separators=(",", ":")
)


def _too_large(what: str) -> EnvelopeError:
    return EnvelopeError(Reason.TOO_LARGE, what)


class _Budget:
    """A lower bound on the output size, to stop early on huge input."""

    __slots__ = ("left",)

    def __init__(self, limit: int):
        self.left = limit

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise _too_large("envelope is larger than the allowed size")


class _NeedsReference(Exception):
    """The fast encoder would not print this value the ECMAScript way."""


# ── key order ───────────────────────────────────────────────────────────────


def array_index(key: str) -> int | None:
    """The numeric value of a JS array-index key ("0", "7", "10"), else None."""
    if not key.isascii() or not key.isdigit() or (key[0] == "0" and len(key) > 1):
        return None
    n = int(key)
    return n if n <= _MAX_ARRAY_INDEX else None


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def jcs_key_order(keys: list[str]) -> list[str]:
    """RFC 8785 order: by UTF-16 code units (Python's str order is by code
    point, which differs once keys mix U+E000…U+FFFF with astral characters)."""
    if all(key.isascii() for key in keys):
        return sorted(keys)
    return sorted(keys, key=_utf16)


def js_key_order(keys: list[str]) -> list[str]:
    """The order ``JSON.stringify`` prints an object built from sorted keys."""
    indexed = []
    named = []
    for key in keys:
        n = array_index(key)
        if n is None:
            named.append(key)
        else:
            indexed.append((n, key))
    indexed.sort()
    # Array.prototype.sort compares UTF-16 code units, as RFC 8785 does.
    return [key for _, key in indexed] + jcs_key_order(named)


# ── validation, shared by both encoders ─────────────────────────────────────


def _keys(value: dict[Any, Any], js: bool) -> list[str]:
    keys = list(value)
    for key in keys:
        if type(key) is not str and not isinstance(key, str):
            raise malformed("object keys must be strings")
    if js and "__proto__" in value:
        # JS assignment of "__proto__" sets the prototype instead of a
        # property, so the reference signer silently leaves it unsigned.
        raise malformed("key '__proto__' cannot be signed in agentprotocol/0.1")
    return js_key_order(keys) if js else jcs_key_order(keys)


def _scalar_check(value: Any, budget: _Budget) -> None:
    if isinstance(value, str):
        budget.spend(len(value) + 2)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise malformed("numbers must be finite (no NaN or Infinity)")
        budget.spend(1)
    elif value is None or isinstance(value, int):
        budget.spend(4)
    else:
        raise malformed(f"{type(value).__name__} is not a JSON value")


def _container(value: Any, depth: int, budget: _Budget) -> bool:
    if not isinstance(value, dict | list | tuple):
        return False
    if depth >= MAX_DEPTH:
        raise _too_large(f"envelope is nested deeper than {MAX_DEPTH} levels")
    budget.spend(2)
    return True


# ── the fast encoder ────────────────────────────────────────────────────────


def _fast(value: Any, max_bytes: int, js: bool) -> bytes:
    """Copy the tree with keys in canonical order and numbers the C encoder
    prints right, then encode it. Written for speed: exact-type dispatch,
    one closure, subclasses and odd types left to the shared checks."""
    left = max_bytes

    def walk(v: Any, depth: int) -> Any:
        nonlocal left
        t = type(v)
        if t is str:
            left -= len(v) + 2
            return v
        if t is int:
            left -= 4
            if -_MAX_SAFE_INT <= v <= _MAX_SAFE_INT:
                return v
            raise _NeedsReference
        if t is float:
            left -= 4
            if v.is_integer():  # False for nan and infinities
                if abs(v) <= _MAX_SAFE_INT:
                    return int(v)  # 1.0 → "1", -0.0 → "0"
                raise _NeedsReference
            if not math.isfinite(v):
                raise malformed("numbers must be finite (no NaN or Infinity)")
            if "e" in repr(v):
                raise _NeedsReference  # Python writes 1e-05 where JS writes 0.00001
            return v
        if t is dict or t is list:
            if depth >= MAX_DEPTH:
                raise _too_large(f"envelope is nested deeper than {MAX_DEPTH} levels")
            if t is list:
                out: Any = [walk(item, depth + 1) for item in v]
            else:
                out = {k: walk(v[k], depth + 1) for k in _keys(v, js)}
                left -= 3 * len(v) + sum(map(len, v))
            if left < 0:
                raise _too_large(f"envelope is larger than {max_bytes} bytes")
            return out
        if v is None or t is bool:
            left -= 5
            return v
        # subclasses (StrEnum, IntEnum), tuples, and what JSON cannot carry
        return walk(_plain(v), depth)

    tree = walk(value, 0)
    if left < 0:
        raise _too_large(f"envelope is larger than {max_bytes} bytes")
    try:
        return _ENCODER.encode(tree).encode("utf-8")
    except UnicodeEncodeError:
        raise malformed("strings must not contain lone surrogates") from None


def _plain(v: Any) -> Any:
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, dict):
        return dict(v)
    if isinstance(v, list | tuple):
        return list(v)
    raise malformed(f"{type(v).__name__} is not a JSON value")


# ── the reference encoder ───────────────────────────────────────────────────


def _reference_tree(value: Any, depth: int, budget: _Budget, js: bool) -> Any:
    """A validated copy, keys in canonical order, big integers widened to doubles."""
    if _container(value, depth, budget):
        if isinstance(value, dict):
            keys = _keys(value, js)
            budget.spend(3 * len(keys) + sum(map(len, keys)))
            return {k: _reference_tree(value[k], depth + 1, budget, js) for k in keys}
        return [_reference_tree(item, depth + 1, budget, js) for item in value]
    _scalar_check(value, budget)
    if isinstance(value, int) and not isinstance(value, bool):
        if not -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
            try:
                return float(value)  # what JSON.parse makes of it
            except OverflowError:
                raise malformed("integer is out of the range of a JSON number") from None
    return value


def _print(value: Any, out: list[bytes]) -> None:
    """Print in the tree's own key order; scalars by the rfc8785 package."""
    if isinstance(value, dict):
        out.append(b"{")
        for i, (key, item) in enumerate(value.items()):
            if i:
                out.append(b",")
            out.append(rfc8785.dumps(key))
            out.append(b":")
            _print(item, out)
        out.append(b"}")
    elif isinstance(value, list):
        out.append(b"[")
        for i, item in enumerate(value):
            if i:
                out.append(b",")
            _print(item, out)
        out.append(b"]")
    else:
        out.append(rfc8785.dumps(value))


def reference(value: Any, *, js: bool, max_bytes: int = MAX_ENVELOPE_BYTES) -> bytes:
    """Canonical bytes by the reference encoder (``js``: agentprotocol order)."""
    tree = _reference_tree(value, 0, _Budget(max_bytes), js)
    out: list[bytes] = []
    try:
        _print(tree, out)
    except rfc8785.CanonicalizationError as exc:
        raise malformed(f"cannot canonicalise: {exc}") from None
    return b"".join(out)


def _canonical(value: Any, max_bytes: int, js: bool) -> bytes:
    try:
        out = _fast(value, max_bytes, js)
    except _NeedsReference:
        out = reference(value, js=js, max_bytes=max_bytes)
    if len(out) > max_bytes:
        raise _too_large(f"envelope is larger than {max_bytes} bytes")
    return out


def jcs(value: Any, *, max_bytes: int = MAX_ENVELOPE_BYTES) -> bytes:
    """RFC 8785 canonical bytes of a parsed JSON value."""
    return _canonical(value, max_bytes, js=False)


def js_canonical(value: Any, *, max_bytes: int = MAX_ENVELOPE_BYTES) -> bytes:
    """agentprotocol/0.1 canonical bytes: JS key order, JSON.stringify formatting."""
    return _canonical(value, max_bytes, js=True)


# ── parsing raw bodies ─────────────────────────────────────────────────────


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise malformed(f"duplicate key {key[:64]!r}")
            seen.add(key)
    return obj


def _no_constants(name: str) -> Any:
    raise malformed(f"{name} is not a JSON number")


def parse_json(raw: bytes | str, *, max_bytes: int = MAX_ENVELOPE_BYTES) -> dict[str, Any]:
    """Parse an envelope body strictly.

    Refuses what the hub's fast parser lets through: duplicate keys (which
    parsers resolve differently, so signer and verifier could disagree on the
    content), ``NaN``/``Infinity``, and bodies over ``max_bytes``.
    """
    if len(raw) > max_bytes:
        raise _too_large(f"envelope is larger than {max_bytes} bytes")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        obj = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except EnvelopeError:
        raise
    except UnicodeDecodeError:
        raise malformed("envelope is not UTF-8") from None
    except RecursionError:
        raise _too_large(f"envelope is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, over-long integer literals
        raise malformed(f"invalid JSON: {str(exc)[:200]}") from None
    if not isinstance(obj, dict):
        raise malformed("an envelope must be a JSON object")
    return obj
