"""hub.net.upgrade: the plain upgrade read and answered as websockets would —
the same Request, the same 101 bytes — and everything else left to websockets."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.http11 import Request
from websockets.server import ServerProtocol

from hub.net.upgrade import MAX_HEADERS, MAX_REQUEST_BYTES, PlainRequest, accept, parse_request
from hub.net.ws_internals import request_from

SERVER = "agora-hub/test"
KEY = "dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455's example: answered s3pPLMBiTxaQ9kYGzzhZRbK+xOo=
PLAIN = [
    ("Host", "127.0.0.1:8765"),
    ("Upgrade", "websocket"),
    ("Connection", "Upgrade"),
    ("Sec-WebSocket-Key", KEY),
    ("Sec-WebSocket-Version", "13"),
]


def request_bytes(headers=PLAIN, line: str = "GET /ws?agent_id=alice HTTP/1.1") -> bytes:
    return (line + "\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers) + "\r\n").encode()


def websockets_request(data: bytes) -> Request | None:
    """What websockets' own parser makes of ``data`` (None: no request, or refused)."""
    protocol = ServerProtocol()
    protocol.receive_data(data)
    events = protocol.events_received()
    return events[0] if events and isinstance(events[0], Request) else None


def websockets_answer(request: Request) -> bytes | None:
    """The bytes websockets writes for ``request`` when it accepts it plainly
    (no extension, no subprotocol); None when it refuses or negotiates."""
    protocol = ServerProtocol()
    response = protocol.accept(request)
    if response.status_code != 101 or protocol.extensions or protocol.subprotocol:
        return None
    response.headers["Server"] = SERVER
    protocol.send_response(response)
    return b"".join(protocol.data_to_send())


def same_request(ours: PlainRequest, b: Request) -> bool:
    a = request_from(ours)
    return (a.path, a.method, a.protocol, list(a.headers.raw_items())) == (
        b.path, b.method, b.protocol, list(b.headers.raw_items()),
    )  # fmt: skip


def undated(answer: bytes) -> bytes:
    return re.sub(rb"\r\nDate: [^\r]*\r\n", b"\r\nDate: -\r\n", answer)


def test_a_plain_upgrade_is_read_and_answered_as_websockets_does():
    data = request_bytes()
    ours, theirs = parse_request(data), websockets_request(data)
    assert ours is not None and theirs is not None
    assert same_request(ours, theirs)
    answer = accept(ours, SERVER)
    assert answer is not None
    assert b"\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in answer
    assert answer.startswith(b"HTTP/1.1 101 Switching Protocols\r\nDate: ")
    assert answer.endswith(b"\r\nServer: agora-hub/test\r\n\r\n")
    assert undated(answer) == undated(websockets_answer(theirs))


def test_header_names_keep_their_case_values_lose_surrounding_blanks():
    data = request_bytes([("hOsT", " x \t"), *PLAIN[1:], ("X-Empty", "")])
    request = parse_request(data)
    assert request is not None and same_request(request, websockets_request(data))
    headers = request_from(request).headers
    assert headers["host"] == "x" and headers["X-Empty"] == ""


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(request_bytes()[:-2], id="headers-not-ended"),
        pytest.param(request_bytes()[:30], id="request-line-only-part"),
        pytest.param(request_bytes() + b"\x81\x80abcd", id="a-frame-after-the-request"),
        pytest.param(request_bytes([*PLAIN, ("X-Name", "caf\xe9")]), id="non-ascii-value"),
        pytest.param(request_bytes(PLAIN, "GET ws HTTP/1.1"), id="path-not-absolute"),
        pytest.param(request_bytes(PLAIN, "GET /ws HTTP/2.0"), id="not-http-1"),
        pytest.param(request_bytes(PLAIN, "get /ws HTTP/1.1"), id="lowercase-method"),
        pytest.param(request_bytes([*PLAIN, ("Content-Length", "0")]), id="content-length"),
        pytest.param(request_bytes([*PLAIN, ("Transfer-Encoding", "chunked")]), id="chunked"),
        pytest.param(request_bytes([*PLAIN, ("Bad Name", "x")]), id="space-in-a-name"),
        pytest.param(
            request_bytes(PLAIN).replace(b"Upgrade: websocket\r\n", b"Upgrade\r\n"), id="no-colon"
        ),
        pytest.param(request_bytes(PLAIN).replace(b"\r\nUpgrade", b"\r\n Upgrade"), id="folded"),
        pytest.param(request_bytes(PLAIN).replace(b"\r\n", b"\n"), id="bare-lf"),
        pytest.param(
            request_bytes([*PLAIN, *((f"X-{i}", "y") for i in range(MAX_HEADERS))]),
            id="too-many-headers",
        ),
        pytest.param(request_bytes([*PLAIN, ("X-Big", "y" * MAX_REQUEST_BYTES)]), id="too-big"),
    ],
)
def test_anything_but_a_whole_plain_request_is_left_to_websockets(data):
    assert parse_request(data) is None


@pytest.mark.parametrize(
    "headers, line",
    [
        pytest.param([*PLAIN, ("Sec-WebSocket-Extensions", "permessage-deflate")], None,
                     id="an-extension-offered"),
        pytest.param([*PLAIN, ("Sec-WebSocket-Protocol", "bearer.tok")], None,
                     id="a-subprotocol-offered"),
        pytest.param([*PLAIN[:4], ("Sec-WebSocket-Version", "8")], None, id="version-8"),
        pytest.param(PLAIN[:4], None, id="no-version"),
        pytest.param([*PLAIN[:3], ("Sec-WebSocket-Key", "c2hvcnQ="), PLAIN[4]], None,
                     id="a-short-key"),
        pytest.param([*PLAIN[:3], ("Sec-WebSocket-Key", "not base64!!!!!!!!!!!!=="), PLAIN[4]],
                     None, id="a-key-not-base64"),
        pytest.param([*PLAIN, ("Sec-WebSocket-Key", KEY)], None, id="two-keys"),
        pytest.param([PLAIN[0], ("Upgrade", "h2c"), *PLAIN[2:]], None, id="upgrade-h2c"),
        pytest.param([*PLAIN, ("Upgrade", "websocket")], None, id="two-upgrades"),
        pytest.param([PLAIN[0], PLAIN[1], ("Connection", "keep-alive"), *PLAIN[3:]], None,
                     id="connection-without-upgrade"),
        pytest.param([PLAIN[0], PLAIN[1], ("Connection", "upgrade, {bad}"), *PLAIN[3:]], None,
                     id="a-malformed-connection-option"),
        pytest.param(PLAIN, "POST /ws HTTP/1.1", id="post"),
        pytest.param(PLAIN, "GET /ws HTTP/1.0", id="http-1.0"),
    ],
)  # fmt: skip
def test_a_request_to_negotiate_or_refuse_is_left_to_accept(headers, line):
    data = request_bytes(headers, line or "GET /ws HTTP/1.1")
    request = parse_request(data)
    assert request is not None and same_request(request, websockets_request(data))
    assert accept(request, SERVER) is None


def test_connection_options_are_read_as_websockets_reads_them():
    for value in ("keep-alive, Upgrade", "UPGRADE", "upgrade ,\tkeep-alive"):
        request = parse_request(
            request_bytes([PLAIN[0], PLAIN[1], ("Connection", value), *PLAIN[3:]])
        )
        assert request is not None
        assert undated(accept(request, SERVER)) == undated(websockets_answer(request_from(request)))


def test_without_a_server_header_none_is_sent():
    answer = accept(parse_request(request_bytes()), None)
    assert answer is not None and b"Server:" not in answer


# Requests near the plain one, valid or not: each header kept, dropped, given
# another value or sent twice, plus extras. Whenever the fast path answers,
# websockets would have given the same request and the same 101.
_VARIANTS = {
    "Upgrade": ["WebSocket", "websocket, h2c", "h2c", ""],
    "Connection": ["keep-alive, upgrade", "close", "", "upgrade, {x}"],
    "Sec-WebSocket-Key": ["AAAAAAAAAAAAAAAAAAAAAA==", "AAAA", "!!!!!!!!!!!!!!!!!!!!!!=="],
    "Sec-WebSocket-Version": ["13, 8", "8", " 13"],
    "Host": ["h"],
}
_EXTRAS = st.sampled_from(
    [
        ("Origin", "https://example.com"),
        ("Authorization", "Bearer abc"),
        ("Sec-WebSocket-Extensions", "permessage-deflate"),
        ("Sec-WebSocket-Protocol", "bearer.abc"),
        ("X-Forwarded-For", "10.0.0.1"),
    ]
)


@st.composite
def near_plain(draw: st.DrawFn) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    for name, value in PLAIN:
        how = draw(st.sampled_from(["keep", "keep", "keep", "drop", "change", "twice"]))
        if how == "drop":
            continue
        if how == "change":
            value = draw(st.sampled_from(_VARIANTS[name]))
        headers.append((name, value))
        if how == "twice":
            headers.append((name, draw(st.sampled_from([value, *_VARIANTS[name]]))))
    extras = draw(st.lists(_EXTRAS, max_size=2))
    return draw(st.permutations(headers + extras))


@settings(max_examples=400, deadline=None)
@given(
    headers=near_plain(),
    line=st.sampled_from(["GET /ws?agent_id=a HTTP/1.1", "GET / HTTP/1.1", "PUT /ws HTTP/1.1"]),
)
def test_whatever_the_fast_path_answers_websockets_answers_the_same(headers, line):
    data = request_bytes(headers, line)
    ours = parse_request(data)
    theirs = websockets_request(data)
    assert ours is not None and theirs is not None and same_request(ours, theirs)
    answer = accept(ours, SERVER)
    if answer is not None:
        expected = websockets_answer(theirs)
        assert expected is not None and undated(answer) == undated(expected)
