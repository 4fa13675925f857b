"""The interop harness itself: the real agora-protocol 0.2.0 library, without the hub.

The real sender is pointed at a small recording aiohttp server and must emit exactly
the requests of the wire captures; the real ReceiverServer is driven with plain HTTP
and must answer exactly as captured. Along the way these tests pin the library habits
a bridge has to live with.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from protocol.agora_http import (
    HashForm,
    decode_reply,
    decode_request,
    encode_source,
    hash_document,
    outbound_request,
)
from tests.support import agora_peer, peer_venv
from tests.support.agora_peer import AgoraPeer, AgoraPeerUnavailable, require_agora_peer
from tests.support.peer_venv import PeerVenv
from tests.support.vectors import load_vector

DOC = 'ADDITION PROTOCOL\n\nAlice sends "2 + 2"; Bob replies "4".'
BASE = "/agora/weather"


@pytest.fixture(scope="module")
def wire() -> dict[str, Any]:
    return load_vector("agora-http-0.2", "agora_protocol_0.2.0_wire.json")


@pytest.fixture(scope="session")
def peer() -> AgoraPeer:
    return require_agora_peer()


class RecordingServer:
    """Answers each request with the next scripted ``(status, json)`` and records it."""

    def __init__(self, script: list[tuple[int, Any]]):
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.server: TestServer | None = None

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "content_type": request.headers.get("Content-Type"),
                "body": (await request.read()).decode(),
            }
        )
        status, reply = self.script.pop(0) if self.script else (200, {"status": "success"})
        return web.json_response(reply, status=status)

    def url(self, path: str = BASE) -> str:
        assert self.server is not None
        return str(self.server.make_url(path))


@pytest.fixture
async def recorder() -> AsyncIterator[Any]:
    started: list[RecordingServer] = []

    async def _start(*script: tuple[int, Any]) -> RecordingServer:
        rec = RecordingServer(list(script))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", rec.handle)
        rec.server = TestServer(app, host="127.0.0.1", port=0)
        await rec.server.start_server()
        started.append(rec)
        return rec

    yield _start
    for rec in started:
        assert rec.server is not None
        await rec.server.close()


def _captured_sender_requests(wire: dict[str, Any]) -> list[dict[str, Any]]:
    return [x for x in wire["exchanges"] if x["side"] == "sender->server"]


def _as_captured(recorded: dict[str, Any]) -> dict[str, Any]:
    """A recorded request with the hub's base path taken off, shaped like a capture."""
    path = recorded["path"].removeprefix(BASE) or "/"
    content_type = recorded["content_type"] if recorded["body"] else None
    return {
        "side": "sender->server",
        "method": recorded["method"],
        "path": path,
        "content_type": content_type,
        "body": recorded["body"],
    }


# ── the real sender ────────────────────────────────────────────────────────


async def test_sender_single_round_is_byte_identical_to_the_capture(peer, recorder, wire):
    server = await recorder((200, {"status": "success", "body": "4"}))
    result = await peer.arun_sender(server.url(), ["2 + 2"], document=DOC)

    assert result.replies == [{"status": "success", "body": "4"}]
    assert [_as_captured(r) for r in server.requests] == _captured_sender_requests(wire)[:1]
    # The library names the document by base64 SHA-1; the hub's parser reads it as hex.
    request = decode_request(server.requests[0]["body"].encode())
    assert result.protocol_hash == "1bfotdllfg/C0rvMRUiHLFhoGQ4="
    assert request.protocol_hash == hash_document(DOC)
    assert request.document_for(request.protocol_hash) == DOC


async def test_sender_multiround_resends_the_protocol_and_deletes(peer, recorder, wire):
    server = await recorder(
        (200, {"status": "success", "body": "one", "conversationId": "conv-1"}),
        (200, {"status": "success", "body": "two"}),
        (200, {"status": "success"}),
    )
    result = await peer.arun_sender(
        server.url(), ["first", "second"], document=DOC, multiround=True, close=True
    )

    assert result.replies == [
        {"status": "success", "body": "one"},
        {"status": "success", "body": "two"},
    ]
    assert result.conversation_id == "conv-1"
    assert result.close == {"error": None}
    assert [_as_captured(r) for r in server.requests] == _captured_sender_requests(wire)[1:4]
    follow_up = json.loads(server.requests[1]["body"])
    assert follow_up["protocolHash"] == "1bfotdllfg/C0rvMRUiHLFhoGQ4="  # against seed 001 §7.2
    assert follow_up["multiround"] is True


async def test_sender_without_protocol(peer, recorder, wire):
    server = await recorder((200, {"status": "success", "body": {"a": 1}}))
    result = await peer.arun_sender(server.url(), ["no protocol"])
    assert result.replies == [{"status": "success", "body": {"a": 1}}]
    assert [_as_captured(r) for r in server.requests] == _captured_sender_requests(wire)[4:5]


@pytest.mark.parametrize(
    ("status", "reply", "multiround", "error_type", "fragment"),
    [
        # A spec failure has no "body": the library's sender cannot read it.
        (200, {"status": "failure", "error": "Unsupported protocol"}, False, "KeyError", "body"),
        (400, {"status": "failure", "error": "malformed JSON"}, False,
         "ProtocolTransportError", "malformed JSON"),
        (200, {"status": "success", "body": "no id"}, True, "Exception", "conversationId"),
    ],
)  # fmt: skip
async def test_sender_habits_on_other_replies(
    peer, recorder, status, reply, multiround, error_type, fragment
):
    server = await recorder((status, reply))
    result = await peer.arun_sender(server.url(), ["x", "never sent"], multiround=multiround)
    assert result.replies == [None]
    assert result.errors[0]["type"] == error_type
    assert fragment in result.errors[0]["message"]
    assert len(server.requests) == 1  # the run stops at the first failure
    assert result.http[0]["status"] == status and json.loads(result.http[0]["text"]) == reply


# ── the real ReceiverServer ────────────────────────────────────────────────


async def _call(
    session: aiohttp.ClientSession, base: str, request: dict[str, Any]
) -> tuple[int, str | None, str]:
    kwargs: dict[str, Any] = {}
    if request.get("json") is not None:
        kwargs["json"] = request["json"]
    elif request.get("raw") is not None:
        kwargs["data"] = request["raw"]
        kwargs["headers"] = {"Content-Type": "application/json"}
    async with session.request(request["method"], base + request["path"], **kwargs) as resp:
        return resp.status, resp.headers.get("Content-Type"), await resp.text()


async def test_receiver_answers_exactly_as_captured(peer, wire):
    captured = [x for x in wire["exchanges"] if x["side"] == "server->sender"]
    receiver = await peer.astart_receiver(reject_hashes=["reject-me"])
    conversation_id = None
    try:
        async with aiohttp.ClientSession() as session:
            for exchange in captured:
                request = dict(exchange["request"])
                if conversation_id is not None:
                    request["path"] = request["path"].replace(
                        "fdb2ff12-71c5-4669-a477-e8426a791d9d", conversation_id
                    )
                status, content_type, text = await _call(session, receiver.url, request)
                assert (status, content_type) == (
                    exchange["http_status"],
                    exchange["content_type"],
                ), request
                if content_type != "application/json":
                    assert text == exchange["response_text"]
                    continue
                got, expected = json.loads(text), json.loads(exchange["response_text"])
                if "conversationId" in expected:
                    conversation_id = got["conversationId"]
                    assert len(conversation_id) == 36  # a uuid4, not our 32-char ids
                    expected["conversationId"] = conversation_id
                assert got == expected, request
        calls = receiver.wait_for_calls(6)
    finally:
        assert receiver.stop() == 0
    assert [c["body"] for c in calls if c["event"] == "message"] == [
        "hi",
        {"a": 1},
        "hi",
        "again",
    ]
    assert [c["protocolHash"] for c in calls if c["event"] == "conversation"] == [
        None,
        None,
        None,
        "reject-me",
    ]


@pytest.mark.parametrize(
    ("form", "expected"),
    [
        (HashForm.BASE64, ("success", "echo:2 + 2", None)),
        # The library verifies sources against base64 only: a spec-conformant hex hash
        # is refused. An outbound bridge to this library must send base64.
        (HashForm.HEX, ("failure", None, "Failed to download protocol")),
    ],
)
async def test_receiver_verifies_hashes_with_the_library_code(peer, form, expected):
    with peer.receiver() as receiver:
        body = outbound_request(
            "2 + 2",
            protocol_hash=hash_document(DOC),
            protocol_sources=[encode_source(DOC)],
            hash_form=form,
        )
        async with (
            aiohttp.ClientSession() as session,
            session.post(receiver.url, json=body) as resp,
        ):
            reply = decode_reply(resp.status, await resp.read())
        assert (reply.status, reply.body, reply.error) == expected


async def test_receiver_canned_answers_and_a_follow_up_crash(peer):
    with peer.receiver(answers={"2 + 2": {"sum": 4}}, raise_on={"boom": "stub failure"}) as r:
        async with aiohttp.ClientSession() as session:
            first = {
                "protocolHash": None,
                "protocolSources": [],
                "body": "2 + 2",
                "multiround": True,
            }
            async with session.post(r.url, json=first) as resp:
                opened = decode_reply(resp.status, await resp.read())
            assert (opened.body, opened.conversation_expires) == ({"sum": 4}, None)
            url = f"{r.url}/conversations/{opened.conversation_id}"
            async with session.post(url, json={"body": "boom"}) as resp:
                # Follow-ups are not guarded in ReceiverServer: an exception is an HTML 500.
                assert resp.status == 500
                reply = decode_reply(resp.status, await resp.read())
        assert reply.error == "HTTP 500 from the remote Agora server"
        assert "stub failure" in r.stderr_text()


async def test_receiver_stops_cleanly(peer):
    receiver = await peer.astart_receiver()
    url = receiver.url
    assert receiver.stop() == 0
    assert receiver.stop() == 0  # idempotent
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.post(url, json={"body": "x"})


def test_receiver_that_cannot_listen_is_reported(peer):
    with peer.receiver() as first:
        with pytest.raises(agora_peer.AgoraPeerError, match="exited"):
            peer.start_receiver(port=first.port)


def test_sync_sender_against_the_real_receiver(peer):
    with peer.receiver() as receiver:
        result = peer.run_sender(receiver.url, ["hi"], document=DOC)
        assert result.replies == [{"status": "success", "body": "echo:hi"}]
        assert receiver.wait_for_calls(2)[0]["protocolHash"] == "1bfotdllfg/C0rvMRUiHLFhoGQ4="


# ── skip or fail ───────────────────────────────────────────────────────────


def test_unavailable_library_skips_but_fails_under_ci(monkeypatch):
    def unavailable(*_args: Any) -> None:
        raise AgoraPeerUnavailable("no index")

    monkeypatch.setattr(agora_peer.VENV, "python", unavailable)
    monkeypatch.setattr(peer_venv, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match="no index"):
        require_agora_peer()
    monkeypatch.setattr(peer_venv, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match="no index"):
        require_agora_peer()


def test_a_failed_install_is_reported_as_unavailable(monkeypatch, tmp_path):
    # An invalid requirement makes pip fail before it reaches any index.
    monkeypatch.setenv("AGORA_PEER_CACHE", str(tmp_path))
    real = agora_peer.VENV
    venv = PeerVenv(real.name, ["agora-protocol==not a version"], real.check, marker=real.marker)
    with pytest.raises(AgoraPeerUnavailable, match="could not be installed"):
        venv.python()
    assert venv.path.parent == tmp_path and (venv.path / "bin" / "python").exists()
    assert not (venv.path / venv.marker).exists()
