"""Seeded hostile HTTP requests for the hub's HTTP port.

:func:`cases` yields :class:`Case` objects — the bytes to write (at once,
trickled, or stalled half-way) and whether the request is a valid one that
must succeed. Whatever a case is, the hub must answer below 500 or close the
connection, in time, repeating no secret. Used by ``python -m tests.fuzz_http``
(``make fuzz-http``) and its short run in ``make test``
(``tests/integration/test_http_hostile.py``).

The target (:class:`Target`) is a hub with the server API (``api_key``), the
status page (``admin_token``), an HTTP Agora space ``agora`` answered by an
agent, and a declared space ``plain`` for envelopes.
"""

from __future__ import annotations

import base64
import gzip
import random
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import orjson

from tests.support.envelopes import (
    agora_env,
    agora_request,
    ap_msg,
    ap_request,
    bad_signature,
    forged,
)

#: Where the valid requests carrying a secret say they come from (the hub
#: trusts the fuzzer's X-Forwarded-For): the hostile mix's wrong secrets are
#: throttled per address, and must not lock the valid ones out.
VALID_FROM = {"X-Forwarded-For": "192.0.2.10"}


@dataclass(frozen=True, slots=True)
class Target:
    http_port: int
    api_key: str
    admin_token: str
    agora_space: str = "agora"
    plain_space: str = "plain"

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.api_key, self.admin_token)


@dataclass(frozen=True, slots=True)
class Case:
    kind: str
    data: bytes
    #: Requests in ``data`` (pipelined); the hub may close after fewer answers.
    requests: int = 1
    #: Write the last ``slow_tail`` bytes one at a time, this many seconds apart.
    trickle: float = 0.0
    slow_tail: int = 0
    #: A valid request: it must be answered 2xx or 3xx.
    valid: bool = False


ALPHABET = string.printable + "é漢😀\u2028\x00\x01\x7f"
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "CONNECT"]


def request(
    method: str,
    path: str,
    body: bytes | str = b"",
    headers: dict[str, str] | None = None,
    *,
    length: int | None = None,
    close: bool = True,
) -> bytes:
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    lines = [f"{method} {path} HTTP/1.1", "Host: hub"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if close:
        lines.append("Connection: close")
    if data or length is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(data) if length is None else length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape") + data


def _junk(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(n))


def _nested(rng: random.Random, depth: int) -> str:
    out = rng.choice(["1", '"x"', "null", "{}", "[]"])
    for _ in range(depth):
        out = f"[{out}]" if rng.random() < 0.5 else f'{{"k":{out}}}'
    return out


def _post_routes(t: Target) -> list[tuple[str, dict[str, str]]]:
    json_ct = {"Content-Type": "application/json"}
    return [
        (f"/agora/{t.agora_space}", {}),
        (f"/agora/{t.agora_space}/conversations/c{'x' * 30}", {}),
        (f"/envelope/{t.plain_space}", {}),
        (f"/agentprotocol/{t.plain_space}", {}),
        ("/agentprotocol", {}),
        ("/api/publish", {"X-API-Key": t.api_key, **json_ct}),
        ("/api/agents/someone/disconnect", {"Authorization": f"apikey {t.api_key}", **json_ct}),
        (
            "/admin/agents/someone/disconnect",
            {"Authorization": f"Bearer {t.admin_token}", **json_ct},
        ),
        ("/admin/login", {"Content-Type": "application/x-www-form-urlencoded"}),
    ]


def _get_paths(t: Target) -> list[str]:
    return [
        "/healthz", "/readyz", "/metrics", "/identity", "/admin", "/admin/state",
        f"/agora/{t.agora_space}/wellknown", "/api/spaces", "/api/agents", "/api/nodes",
        f"/api/spaces/{t.agora_space}/members", "/admin/static/admin.js",
    ]  # fmt: skip


def _bodies(rng: random.Random) -> bytes:
    """A JSON-ish body, mostly wrong."""
    choice = rng.randrange(14)
    if choice == 0:
        return _junk(rng, rng.randrange(0, 200)).encode("utf-8", "surrogatepass")
    if choice == 1:
        return rng.randbytes(rng.randrange(1, 300))
    if choice == 2:
        depth = rng.choice([62, 63, 64, 65, 200, 254, 300, 1100])
        return f'{{"body": {_nested(rng, depth)}}}'.encode()
    if choice == 3:
        return f'{{"reason": {_nested(rng, rng.randrange(1, 2000))}}}'.encode()
    if choice == 4:
        return b'{"body": ' + str(rng.choice([2**64, -(2**63) - 1, 10**30])).encode() + b"}"
    if choice == 5:
        return b'{"body": "x", "body": NaN}'
    if choice == 6:
        return b'{"body": "\\ud800", "space": "\\udfff"}'
    if choice == 7:
        return b'{"body": "' + b"x" * rng.randrange(1, 5000) + b'"'  # unterminated
    if choice == 8:
        return orjson.dumps(rng.choice([[1, 2], "body", None, 3, {"space": 1, "data": []}]))
    if choice == 9:
        space = rng.choice(["agent.status", "../x", "A" * 200, ""])
        to = rng.choice([5, [], ["x"] * 3])
        return orjson.dumps({"space": space, "data": {"text": _junk(rng, 20)}, "to": to})
    if choice == 10:
        fields = {"protocolHash": _junk(rng, 28), "protocolSources": [_junk(rng, 10)]}
        return orjson.dumps({"body": {"a": [1, {"b": None}]}, **fields, "multiround": True})
    if choice == 11:
        return b"token=" + rng.randbytes(20).hex().encode() + b"&token=%ff%00"
    if choice == 12:
        return b"[" * rng.randrange(1000, 5000)
    return b""


def _json_body(rng: random.Random, t: Target) -> Case:
    path, headers = rng.choice(_post_routes(t))
    return Case("json-body", request("POST", path, _bodies(rng), headers))


def _envelope(rng: random.Random, t: Target) -> Case:
    agora = rng.random() < 0.5
    if agora:
        env = rng.choice([agora_request(), agora_env("RESULT", {"request_id": "x", "r": 1})])
    else:
        env = rng.choice([ap_request(), ap_msg("hello", {})])
    spoil = rng.randrange(6)
    if spoil == 0:
        env = forged(env)
    elif spoil == 1:
        env = bad_signature(env)
    elif spoil == 2:
        env = {**env, "timestamp": rng.choice([0, -1, "x", 10**18, None])}
    elif spoil == 3:
        env = {**env, "payload": orjson.loads(_nested(rng, rng.choice([10, 63, 64])))}
    elif spoil == 4:
        env = {k: v for k, v in env.items() if rng.random() < 0.6}
    path = f"/envelope/{t.plain_space}" if agora else f"/agentprotocol/{t.plain_space}"
    if rng.random() < 0.2:  # the other format's route
        path = f"/agentprotocol/{t.plain_space}" if agora else f"/envelope/{t.plain_space}"
    return Case("envelope", request("POST", path, orjson.dumps(env)))


def _form(rng: random.Random, t: Target) -> Case:
    boundary = rng.choice(["", "; boundary=xyz", "; boundary=" + "b" * 90, '; boundary=""'])
    body = rng.choice([
        "garbage", "--xyz\r\n", '--xyz\r\nContent-Disposition: form-data; name="t',
        '--xyz\r\nContent-Disposition: form-data; name="token"\r\n\r\nabc',
        '--xyz\r\nContent-Transfer-Encoding: weird\r\nContent-Disposition: form-data; '
        'name="token"\r\n\r\nabc\r\n--xyz--\r\n',
        '--xyz\r\nContent-Type: text/plain; charset=nope\r\nContent-Disposition: form-data; '
        'name="token"\r\n\r\nabc\r\n--xyz--\r\n',
        '--xyz\r\nContent-Disposition: form-data; name="token"; filename="f"\r\n\r\n'
        + "z" * 3000 + "\r\n--xyz--\r\n",
    ])  # fmt: skip
    ct = rng.choice(["multipart/form-data", "application/x-www-form-urlencoded; charset=nope-1"])
    return Case("form", request("POST", "/admin/login", body, {"Content-Type": ct + boundary}))


def _bad_head(rng: random.Random, t: Target) -> Case:
    secret = rng.choice(t.secrets)
    head = rng.choice([
        f"X-API-Key: {secret}\x01", f"Authorization: Bearer {secret}\x7f",
        f"Authorization: apikey {secret}\x00", f"X-{secret}\x01: x", f"{secret}",
        "X-Big: " + secret * rng.randrange(100, 3000), f" folded: {secret}",
        f"Content-Length: {secret}", "Content-Length: -5", "Content-Length: 99999999999999999999",
        "Content-Length: 5\r\nContent-Length: 6", "Transfer-Encoding: chunked\r\nContent-Length: 3",
        "Transfer-Encoding: gzip, chunked, chunked", "Transfer-Encoding: \x0bchunked",
        "Host: a\r\nHost: b", "\r\n".join(f"X-{i}: {i}" for i in range(rng.randrange(100, 300))),
        f"Cookie: agora_admin={secret}\x01",
    ])  # fmt: skip
    method = rng.choice(METHODS)
    path = rng.choice(_get_paths(t) + [p for p, _ in _post_routes(t)])
    data = f"{method} {path} HTTP/1.1\r\nHost: hub\r\n{head}\r\n\r\n".encode("utf-8", "replace")
    return Case("bad-head", data)


def _bad_line(rng: random.Random, t: Target) -> Case:
    line = rng.choice([
        "GET", "GET /healthz", "GET /healthz HTTP/9.9", "GET /healthz HTTP/1.1x",
        "G\x00T /healthz HTTP/1.1", "GET  /healthz  HTTP/1.1", "get /healthz HTTP/1.1",
        "GET " + "/" + "a" * rng.randrange(8000, 20000) + " HTTP/1.1", "\x16\x03\x01\x02\x00\x01",
        "PRI * HTTP/2.0", "GET http://evil.example/healthz HTTP/1.1", "GET * HTTP/1.1",
        f"{_junk(rng, 8)} /healthz HTTP/1.1", "GET /healthz?" + "&x" * 5000 + " HTTP/1.1",
    ])  # fmt: skip
    return Case("bad-line", f"{line}\r\nHost: hub\r\n\r\n".encode("utf-8", "surrogateescape"))


def _path(rng: random.Random, t: Target) -> Case:
    path = rng.choice([
        "/admin/static/../../../etc/passwd", "/admin/static/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/admin/static/admin.js%00.html", "//admin", "/agora/%ff%fe", "/agora/" + "w" * 5000,
        f"/agora/{t.agora_space}/conversations/..%2f..%2fx", "/api/../admin/state",
        "/api/spaces/%00/members?limit=-1", "/api/agents?limit=99999999999&cursor=%ff",
        "/api/spaces/x/members?limit=abc", "/admin/state?space=" + "%" * 20, "/identity/..;/x",
        "/%E2%80%A8", "/api", "/api/", "/admin/", "/metrics?x=" + "y" * 3000,
    ])  # fmt: skip
    method = rng.choice(METHODS[:7])
    auth = rng.choice([{}, {"X-API-Key": t.api_key}, {"Authorization": f"Bearer {t.admin_token}"},
                       {"X-API-Key": "wrong" * 5}, {"Authorization": "Bearer"}])  # fmt: skip
    return Case("path", request(method, path, headers=auth))


def _auth(rng: random.Random, t: Target) -> Case:
    path = rng.choice(["/api/spaces", "/api/publish", "/admin/state", "/api/nodes"])
    auth = rng.choice([
        {"X-API-Key": ""}, {"X-API-Key": t.api_key[:-1]}, {"X-API-Key": t.api_key + "x"},
        {"Authorization": "apikey"}, {"Authorization": f"Basic {base64.b64encode(b'a:b')!r}"},
        {"Authorization": f"Bearer {t.api_key}"}, {"Authorization": "Bearer " + "x" * 6000},
        {"Cookie": "agora_admin=" + "y" * 200}, {"Cookie": "agora_admin=a.b.c; agora_admin=d"},
        {"X-API-Key": t.api_key, "Authorization": "apikey wrong"},
    ])  # fmt: skip
    method = "POST" if path == "/api/publish" else "GET"
    return Case("auth", request(method, path, b"{}" if method == "POST" else b"", auth))


def _chunked(rng: random.Random, t: Target) -> Case:
    path, headers = rng.choice([*_post_routes(t), ("/healthz", {})])
    body = rng.choice([
        b"zz\r\nabc\r\n0\r\n\r\n", b"3\r\nabc", b"ffffffffffffffffff\r\nab\r\n",
        b"-1\r\n\r\n", b"3;ext=" + b"e" * 9000 + b"\r\nabc\r\n0\r\n\r\n",
        b"3\r\nabcXX0\r\n\r\n", b"0\r\nTrailer: " + b"t" * 9000 + b"\r\n\r\n",
        b'2\r\n{"\r\n5\r\nbody"\r\n0\r\n\r\n', b"3\r\n[1]\r\n0\r\n\r\n",
    ])  # fmt: skip
    lines = [f"POST {path} HTTP/1.1", "Host: hub", "Transfer-Encoding: chunked"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return Case("chunked", ("\r\n".join(lines) + "\r\n\r\n").encode() + body)


def _encoded(rng: random.Random, t: Target) -> Case:
    path, headers = rng.choice(_post_routes(t))
    encoding = rng.choice(["gzip", "deflate", "br", "zstd", "x-nope"])
    body = rng.choice([
        rng.randbytes(50), gzip.compress(b'{"body": "hi"}'),
        gzip.compress(b"[" * 200_000), gzip.compress(b" " * 3_000_000),
    ])  # fmt: skip
    return Case("encoded", request("POST", path, body, {**headers, "Content-Encoding": encoding}))


def _pipelined(rng: random.Random, t: Target) -> Case:
    parts = [request("GET", "/healthz", close=False)]
    while len(parts) < 4 and rng.random() < 0.7:
        data = rng.choice([_json_body, _bad_head, _path])(rng, t).data
        if not data.startswith(b"HEAD "):  # (no way to tell where its answer ends)
            parts.append(data.replace(b"Connection: close\r\n", b""))
    return Case("pipelined", b"".join(parts), requests=len(parts))


def _slow(rng: random.Random, t: Target) -> Case:
    path, headers = rng.choice(_post_routes(t))
    full = request("POST", path, b'{"body": "' + b"s" * 200 + b'"}', headers)
    if rng.random() < 0.5:  # trickle the head, or stall in it
        cut = rng.randrange(1, full.index(b"\r\n\r\n"))
    else:  # stall the body, or trickle it far below http_body_min_rate
        cut = full.index(b"\r\n\r\n") + 4 + rng.randrange(0, 50)
    if rng.random() < 0.5:
        return Case("slow-stalled", full[:cut])
    return Case("slow-trickled", full, trickle=0.05, slow_tail=len(full) - cut)


def _valid(rng: random.Random, t: Target) -> Case:
    choice = rng.randrange(5)
    if choice == 0:
        data = request("POST", f"/agora/{t.agora_space}", orjson.dumps({"body": _junk(rng, 30)}))
    elif choice == 1:
        body = orjson.dumps({"space": t.plain_space, "data": {"text": _junk(rng, 30)}})
        headers = {"X-API-Key": t.api_key, "Content-Type": "application/json", **VALID_FROM}
        data = request("POST", "/api/publish", body, headers)
    elif choice == 2:
        headers = {"Authorization": f"Bearer {t.admin_token}", **VALID_FROM}
        data = request("GET", "/admin/state", headers=headers)
    elif choice == 3:
        envelope = orjson.dumps(agora_env("STATUS", {"status": _junk(rng, 10)}))
        data = request("POST", f"/envelope/{t.plain_space}", envelope)
    else:
        data = request("GET", rng.choice(["/healthz", "/readyz", "/identity", "/metrics"]))
    return Case("valid", data, valid=True)


Maker = Callable[[random.Random, Target], Case]
MAKERS: list[tuple[Maker, int]] = [
    (_json_body, 20), (_envelope, 10), (_form, 5), (_bad_head, 12), (_bad_line, 6),
    (_path, 10), (_auth, 6), (_chunked, 8), (_encoded, 5), (_pipelined, 5), (_slow, 3),
    (_valid, 10),
]  # fmt: skip


def cases(rng: random.Random, target: Target) -> Iterator[Case]:
    """An endless seeded mix of hostile (and some valid) requests."""
    makers, weights = zip(*MAKERS, strict=True)
    while True:
        yield rng.choices(makers, weights)[0](rng, target)
