"""Seeded bad input for the hub: what hostile or careless clients send.

:func:`cases` yields :class:`Case` objects — a frame (text, invalid UTF-8 or
binary) and what the hub must do with it: answer with an error of one of the
allowed codes and stay open, answer normally, or close with a given code
after an ``error`` event. Used by ``tests/integration/test_bad_input.py``
(a short run in ``make test``) and by ``python -m tests.fuzz`` (``make fuzz``,
hundreds of thousands of frames).
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

SPACE = "fuzz"
# Errors a refused frame may get. Never INTERNAL_ERROR: that is a hub bug.
REFUSALS = frozenset(
    {"INVALID_REQUEST", "UNAUTHORIZED", "SPACE_NOT_FOUND", "RATE_LIMITED", "SPACE_FULL"}
)


@dataclass(frozen=True, slots=True)
class Case:
    kind: str
    frame: str | bytes
    #: "refuse": an error event from REFUSALS, connection stays open;
    #: "any": a normal reply or a refusal, connection stays open;
    #: "close": error event, then the close code below.
    expect: str
    invalid_utf8: bool = False  # send ``frame`` (bytes) as a *text* frame
    close_code: int | None = None


def _nested(depth: int, rng: random.Random) -> str:
    opens = "".join(rng.choice("[{") for _ in range(depth))
    inner = "1"
    out = inner
    for ch in reversed(opens):
        out = f"[{out}]" if ch == "[" else f'{{"k":{out}}}'
    return out


def _junk_text(rng: random.Random, n: int) -> str:
    alphabet = string.printable + '{}[]":,\\é漢😀\u2028\x00'
    return "".join(rng.choice(alphabet) for _ in range(n))


def _msg(**fields: object) -> str:
    return orjson.dumps(fields).decode()


def cases(rng: random.Random, max_frame: int) -> Iterator[Case]:
    """An endless seeded mix of bad (and a few good) frames."""
    makers = [
        _garbage,
        _binary,
        _not_object,
        _unknown_type,
        _wrong_types,
        _deep,
        _big_int,
        _bad_names,
        _stream_misuse,
        _register,
        _publish_ok,
        _long_strings,
        _invalid_utf8,
        _oversize,
    ]
    weights = [10, 5, 5, 5, 12, 8, 6, 6, 8, 6, 8, 4, 1, 1]
    while True:
        maker = rng.choices(makers, weights)[0]
        yield maker(rng, max_frame)


def _garbage(rng: random.Random, _: int) -> Case:
    text = rng.choice(
        [
            _junk_text(rng, rng.randint(0, 200)),
            "{" * rng.randint(1, 50),
            '{"type": "space.publish", "space": "fuzz", "data": {',
            "NaN",
            '{"a": NaN}',
            '{"type": "space.join", "space": "fuzz"',
            '"\\ud800"',
            "",
            " ",
        ]
    )
    return Case("garbage", text, "refuse")


def _binary(rng: random.Random, _: int) -> Case:
    return Case("binary", rng.randbytes(rng.randint(0, 64)), "refuse")


def _not_object(rng: random.Random, _: int) -> Case:
    return Case("not-object", rng.choice(["[]", "1", '"x"', "null", "true", "[{}]"]), "refuse")


def _unknown_type(rng: random.Random, _: int) -> Case:
    kind = rng.choice(["space.explode", "", "SPACE.JOIN", 1, None, ["space.join"]])
    return Case("unknown-type", _msg(type=kind, id="u"), "refuse")


def _wrong_types(rng: random.Random, _: int) -> Case:
    frame = rng.choice(
        [
            _msg(type="space.join", space=1),
            _msg(type="space.join", space=None),
            _msg(type="space.publish", space=SPACE, data="text"),
            _msg(type="space.publish", space=SPACE, data=[1, 2]),
            _msg(type="space.publish", space=SPACE, data={}, echo="yes"),
            _msg(type="agent.register", agent="me"),
            _msg(type="agent.register", agent={"id": 5}),
            _msg(type="space.event.delta", space=SPACE, event_id=7, data={"text": "x"}),
            _msg(type="space.event.delta", space=SPACE, event_id="s", data={"text": 1}),
            _msg(type="space.leave", space=SPACE, id={"nested": True}),
            _msg(type="agent.heartbeat", timestamp="soon"),
        ]
    )
    return Case("wrong-types", frame, "refuse")


def _deep(rng: random.Random, _: int) -> Case:
    depth = rng.choice([66, 100, 255, 256, 300, 1023, 1100, 5000])
    where = rng.choice(["publish", "register", "delta"])
    inner = _nested(depth, rng)
    if where == "publish":
        frame = f'{{"type":"space.publish","id":"d","space":"{SPACE}","data":{{"x":{inner}}}}}'
    elif where == "register":
        frame = (
            '{"type":"agent.register","id":"d","agent":{"id":"{agent}","metadata":{"x":'
            + inner
            + "}}}"
        )
    else:
        frame = (
            f'{{"type":"space.event.delta","id":"d","space":"{SPACE}",'
            f'"event_id":"deep{rng.randint(0, 9)}","data":{{"text":"t","x":{inner}}}}}'
        )
    return Case(f"deep-{where}", frame, "refuse")


def _big_int(rng: random.Random, _: int) -> Case:
    n = rng.choice(
        ["18446744073709551617", "12345678901234567890123", "-9223372036854775809", "1" * 400]
    )
    frame = f'{{"type":"space.publish","id":"b","space":"{SPACE}","data":{{"n":{n}}}}}'
    return Case("big-int", frame, "refuse")


def _bad_names(rng: random.Random, _: int) -> Case:
    space = rng.choice(["", "UPPER", "a b", "x" * 129, "agent.nope", "../etc", "mcp.", "task."])
    kind = rng.choice(["space.join", "space.leave", "space.publish"])
    return Case("bad-name", _msg(type=kind, id="n", space=space, data={}), "refuse")


def _stream_misuse(rng: random.Random, _: int) -> Case:
    frame = rng.choice(
        [
            _msg(type="space.event.done", id="s", space=SPACE, event_id="never-opened"),
            _msg(type="space.event.cancel", id="s", space=SPACE, event_id="nobody/nothing"),
            _msg(type="space.event.delta", id="s", space=SPACE, event_id="a/b", data={"text": ""}),
            _msg(type="space.event.delta", id="s", space="elsewhere", event_id="e", data={}),
        ]
    )
    return Case("stream-misuse", frame, "refuse")


def _register(rng: random.Random, _: int) -> Case:
    frame = rng.choice(
        [
            _msg(type="agent.register", id="r", agent={"id": "someone-else"}),
            _msg(type="agent.register", id="r", agent={"id": "{agent}", "type": "x" * 65}),
            _msg(type="agent.register", id="r", agent={"id": "{agent}", "capabilities": [1]}),
        ]
    )
    return Case("register", frame, "refuse")


def _publish_ok(rng: random.Random, _: int) -> Case:
    data = {"text": _junk_text(rng, rng.randint(0, 50)), "n": rng.randint(-(2**63), 2**64 - 1)}
    kind = rng.choice(["publish", "join", "list", "heartbeat"])
    if kind == "publish":
        frame = _msg(type="space.publish", id="ok", space=SPACE, data=data)
    elif kind == "join":
        frame = _msg(type="space.join", id="ok", space=SPACE)
    elif kind == "list":
        frame = _msg(type="space.list", id="ok")
    else:
        frame = _msg(type="agent.heartbeat", id="ok")
    return Case(f"ok-{kind}", frame, "any")


def _long_strings(rng: random.Random, max_frame: int) -> Case:
    n = rng.choice([129, 300, max_frame // 4])
    frame = rng.choice(
        [
            _msg(type="space.join", id="x" * n, space=SPACE),
            _msg(type="space.event.cancel", id="l", space=SPACE, event_id="e" * n),
            _msg(type="space.publish", id="l", space="s" * n, data={}),
        ]
    )
    return Case("long-strings", frame, "refuse")


def _invalid_utf8(rng: random.Random, _: int) -> Case:
    raw = rng.choice([b"\xff", b"\xc3\x28", b'{"type":"\xed\xa0\x80"}', b"\xe2\x82", b"\xf8\x88"])
    return Case("invalid-utf8", raw, "close", invalid_utf8=True, close_code=1007)


def _oversize(rng: random.Random, max_frame: int) -> Case:
    return Case("oversize", "x" * (max_frame + 1 + rng.randint(0, 100)), "close", close_code=1009)
