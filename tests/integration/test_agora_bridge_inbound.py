"""HTTP Agora inbound: real hub, real HTTP requests, a real agent answering over WebSocket."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from adapters.agora_http import AgoraHttpInbound, InboundOptions
from adapters.agora_http.protocols import documents_by_hash
from protocol.agora_http import HashForm, encode_source, format_hash, hash_document
from tests.support.agora_bridge import (
    ADDITION_DOC,
    WEATHER_DOC,
    Responder,
    call,
    echo_answer,
    write_config,
)
from tests.support.wsclient import WsClient

SPACE = "weather"
OTHER_DOC = "name: Other\ndescription: x\nmultiround: true\n---\nNot declared anywhere.\n"


def config(tmp_path: Path) -> Path:
    (tmp_path / "weather.md").write_text(WEATHER_DOC)
    return write_config(
        tmp_path / "hub.toml",
        f"""
[[spaces]]
id = "{SPACE}"
agora_http = true
agora_protocols = ["{tmp_path / "weather.md"}"]

[[spaces]]
id = "sunny"
agora_http = true

[[spaces]]
id = "quiet"
""",
    )


@pytest.fixture
async def weather(hub, tmp_path) -> Any:
    """Factory: a hub serving HTTP Agora for ``weather`` and ``sunny``; ``options``
    replaces the adapter built from the config."""

    async def _start(options: InboundOptions | None = None, **settings: Any) -> Any:
        adapters = None
        if options is not None:
            docs = {SPACE: documents_by_hash([WEATHER_DOC]), "sunny": {}}
            adapters = [AgoraHttpInbound(docs, options)]
        return await hub(config=config(tmp_path), adapters=adapters, **settings)

    return _start


@pytest.fixture
async def responders() -> Any:
    started: list[Responder] = []

    async def _start(server: Any, agent_id: str = "forecaster", **kwargs: Any) -> Responder:
        space = kwargs.pop("space", SPACE)
        url = server if isinstance(server, str) else server.url
        responder = await Responder(url, agent_id, space, **kwargs).start()
        started.append(responder)
        return responder

    yield _start
    for responder in started:
        await responder.aclose()


def agora(server: Any, path: str = "") -> str:
    return f"{server.http_url}/agora/{SPACE}{path}"


# ── single round ───────────────────────────────────────────────────────────


async def test_single_round_string_body(weather, responders):
    server = await weather()
    responder = await responders(server)
    status, reply = await call("POST", agora(server), {"protocolHash": None, "body": "hello"})
    assert (status, reply) == (200, {"status": "success", "body": "echo:hello"})
    [event] = responder.seen
    assert event["from"] == "agora-http" and event["space"] == SPACE
    assert event["data"] == {
        "via": "agora-http",
        "body": "hello",
        "text": "hello",
        "protocolHash": None,
        "protocolSources": [],
        "multiround": False,
        "conversation_id": None,
        "from": "agora-http",
    }


async def test_object_body_and_a_broadcast_reply(weather, responders):
    server = await weather()
    responder = await responders(server, to_http=False)  # the reply goes to the whole space
    body = {"city": "London", "date": "2025-04-25"}
    status, reply = await call("POST", agora(server), {"body": body})
    assert (status, reply) == (200, {"status": "success", "body": {"echo": body}})
    assert "text" not in responder.seen[0]["data"]


async def test_reply_text_when_there_is_no_body_and_failure_replies(weather, responders):
    server = await weather()

    def answer(data: dict[str, Any]) -> dict[str, Any]:
        if data["body"] == "fail":
            return {"status": "failure", "error": "No such city"}
        if data["body"] == "fail-object":
            return {"status": "failure", "error": {"code": 7}}
        if data["body"] == "library-error":  # the agora-protocol library's shape
            return {"status": "error", "message": "Out of forecasts"}
        return {"text": "plain text answer"}

    await responders(server, answer=answer)
    assert await call("POST", agora(server), {"body": "x"}) == (
        200,
        {"status": "success", "body": "plain text answer"},
    )
    assert await call("POST", agora(server), {"body": "fail"}) == (
        200,
        {"status": "failure", "error": "No such city"},
    )
    _status, reply = await call("POST", agora(server), {"body": "fail-object"})
    assert reply == {"status": "failure", "error": '{"code":7}'}
    _status, reply = await call("POST", agora(server), {"body": "library-error"})
    assert reply == {"status": "failure", "error": "Out of forecasts"}


async def test_only_the_first_reply_counts(weather, responders):
    server = await weather()
    observer = await WsClient.connect(server.url, "observer")
    await observer.join(SPACE)
    # Both answer, to the whole space so the observer sees both replies.
    await responders(server, "first", answer=lambda d: {"body": "from first"}, to_http=False)
    await responders(server, "second", answer=lambda d: {"body": "from second"}, to_http=False)
    status, reply = await call("POST", agora(server), {"body": "q"})
    replies = [
        await observer.wait_for("space.event", **{"from": agent}) for agent in ("first", "second")
    ]
    first = min(replies, key=lambda e: e["seq"])  # the lower seq wins
    assert (status, reply) == (200, {"status": "success", "body": first["data"]["body"]})
    await observer.close()


# ── streams ────────────────────────────────────────────────────────────────


async def test_streamed_reply_is_assembled_and_a_streamed_request_arrives_whole(
    weather, responders
):
    server = await weather(stream_threshold=1024, stream_chunk=256)
    big_answer = "é-answer " * 2000  # far above the threshold: the hub streams it

    def answer(data: dict[str, Any]) -> dict[str, Any]:
        return {"text": big_answer, "seen": len(data["text"])}

    responder = await responders(server, answer=answer)
    big_request = "ü-request " * 500
    status, reply = await call("POST", agora(server), {"body": big_request})
    assert (status, reply) == (200, {"status": "success", "body": big_answer})
    assert responder.seen[0]["data"]["text"] == big_request


async def test_a_long_body_is_carried_once_by_the_deltas_text_both_ways(weather):
    """At the default thresholds (64 KiB, 16 KiB deltas), on the wire: a long
    string body's deltas concatenate to the body exactly once; the first delta
    also carries the other ``data`` fields, ``body`` among them (contract §5,
    §9), which an assembler keeps as a field, not as text. A long reply
    streamed back — a client stream, or one event the hub streams whose first
    delta carries the whole ``body`` too — is answered exactly once."""
    server = await weather()
    agent = await WsClient.connect(server.url, "forecaster", heartbeat=True)
    await agent.join(SPACE)
    body = "é-0123456789 " * 8_000  # 112 000 bytes: streamed
    answer = "ü-answer " * 12_000
    loop = asyncio.get_running_loop()

    async def request_frames() -> list[dict[str, Any]]:
        frames = []
        while not frames or frames[-1]["type"] != "space.event.done":
            msg = await agent.recv()
            if msg.get("from") == "agora-http" and msg["type"].startswith("space.event"):
                frames.append(msg)
        return frames

    asking = loop.create_task(call("POST", agora(server), {"body": body}))
    *deltas, done = await request_frames()
    assert {m["type"] for m in deltas} == {"space.event.delta"} and len(deltas) > 2
    assert {m["event_id"] for m in deltas} == {done["event_id"]}
    assert "".join(m["data"]["text"] for m in deltas) == body
    first = deltas[0]["data"]
    assert first["body"] == body and len(first["text"].encode()) <= 16 * 1024
    assert all(set(m["data"]) == {"text"} for m in deltas[1:])
    # The reply as a client stream, in three deltas.
    third = len(answer) // 3
    parts = [answer[:third], answer[third : 2 * third], answer[2 * third :]]
    for i, part in enumerate(parts):
        delta: dict[str, Any] = {"type": "space.event.delta", "space": SPACE}
        delta |= {"event_id": "reply-1", "data": {"text": part}}
        if i == 0:
            delta["to"] = "agora-http"
            delta["data"]["in_reply_to"] = done["event_id"]
        await agent.send(delta)
    await agent.send({"type": "space.event.done", "space": SPACE, "event_id": "reply-1"})
    assert await asking == (200, {"status": "success", "body": answer})

    # One event with both, as the bridge's own requests are: the hub streams it.
    asking = loop.create_task(call("POST", agora(server), {"body": body}))
    *_, done = await request_frames()
    reply = {"in_reply_to": done["event_id"], "body": answer, "text": answer}
    await agent.send({"type": "space.publish", "space": SPACE, "to": "agora-http", "data": reply})
    assert await asking == (200, {"status": "success", "body": answer})
    await agent.close()


async def test_a_string_body_too_large_for_one_frame_is_refused_whole(weather):
    """A string body travels as both ``body`` and ``text``, and the first delta
    of its stream carries ``body`` whole: a body under ``max_request_bytes``
    whose first delta would not fit in ``max_frame_bytes`` (1 MiB) is refused
    413 and nothing is published; one that fits reaches an agent whose
    WebSocket library takes frames of at most 1 MiB (the ``websockets``
    default), which a larger frame would close 1009."""
    server = await weather()
    agent = await WsClient.connect(server.url, "forecaster", heartbeat=True, max_size=2**20)
    await agent.join(SPACE)
    status, reply = await call("POST", agora(server), {"body": "x" * 1_040_000})
    assert status == 413 and "one hub frame" in reply["error"], reply
    # Counted as written: a control character is six bytes of JSON (\u0001).
    status, reply = await call("POST", agora(server), {"body": "\x01" * 171_000})
    assert status == 413 and "one hub frame" in reply["error"], reply

    loop = asyncio.get_running_loop()
    body = "y" * 1_000_000
    asking = loop.create_task(call("POST", agora(server), {"body": body}))
    frames = []
    while not frames or frames[-1]["type"] != "space.event.done":
        msg = await agent.recv()
        if msg.get("from") == "agora-http" and msg["type"].startswith("space.event"):
            frames.append(msg)
    first = frames[0]["data"]
    assert first["body"] == body, "only the body that fits was published"
    assert "".join(m["data"]["text"] for m in frames[:-1]) == body
    reply = {"in_reply_to": frames[-1]["event_id"], "text": "noted"}
    await agent.send({"type": "space.publish", "space": SPACE, "to": "agora-http", "data": reply})
    assert await asking == (200, {"status": "success", "body": "noted"})
    await agent.close()


async def test_a_streamed_reply_over_the_bound_is_a_failure(weather, responders):
    server = await weather(InboundOptions(max_reply_bytes=4096), stream_threshold=1024)
    await responders(server, answer=lambda d: {"text": "x" * 10_000})
    status, reply = await call("POST", agora(server), {"body": "q"})
    assert status == 200 and reply["status"] == "failure"
    assert "larger than 4096 bytes" in reply["error"]


# ── conversations ──────────────────────────────────────────────────────────


async def test_multiround_three_turns_then_delete_then_refused(weather, responders):
    server = await weather()
    turns: list[str] = []

    def answer(data: dict[str, Any]) -> dict[str, Any] | None:
        if data.get("end_conversation"):
            turns.append("ended")
            return None
        turns.append(data["body"])
        return {"body": f"turn {len(turns)}: {data['body']}"}

    responder = await responders(server, answer=answer)
    before = time.time()
    status, first = await call("POST", agora(server), {"body": "one", "multiround": True})
    assert status == 200 and first["body"] == "turn 1: one"
    cid = first["conversationId"]
    assert len(cid) == 32 and before + 299 <= first["conversationExpires"] <= time.time() + 300
    follow = agora(server, f"/conversations/{cid}")
    for n, text in [(2, "two"), (3, "three")]:
        status, reply = await call("POST", follow, {"body": text, "status": "success"})
        assert status == 200 and reply["body"] == f"turn {n}: {text}"
        assert reply["conversationId"] == cid
    assert [e["data"]["conversation_id"] for e in responder.seen] == [cid] * 3
    assert [e["data"]["multiround"] for e in responder.seen] == [True] * 3

    assert await call("DELETE", follow) == (200, {"status": "success"})
    ended = (await responder.wait_seen(4))[3]["data"]
    assert ended == {
        "via": "agora-http",
        "conversation_id": cid,
        "end_conversation": True,
        "from": "agora-http",
    }
    assert await call("POST", follow, {"body": "four"}) == (
        200,
        {"status": "failure", "error": "Conversation not found"},
    )
    assert await call("DELETE", follow) == (
        200,
        {"status": "failure", "error": "Conversation not found"},
    )
    assert turns == ["one", "two", "three", "ended"]


async def test_conversation_expires(weather, responders):
    server = await weather(InboundOptions(conversation_ttl=1.0))
    await responders(server)
    _status, first = await call("POST", agora(server), {"body": "one", "multiround": True})
    cid, expires = first["conversationId"], first["conversationExpires"]
    # Waiting for the announced expiry to pass is the event this test is about.
    await asyncio.sleep(max(0.0, expires + 1.2 - time.time()))
    follow = agora(server, f"/conversations/{cid}")
    assert await call("POST", follow, {"body": "late"}) == (
        200,
        {"status": "failure", "error": "Conversation expired"},
    )


async def test_follow_ups_extend_the_conversation(weather, responders):
    # Seconds of margin on every side: a busy machine must not make this flaky.
    server = await weather(InboundOptions(conversation_ttl=6.0))
    await responders(server)
    _, first = await call("POST", agora(server), {"body": "one", "multiround": True})
    follow = agora(server, f"/conversations/{first['conversationId']}")
    await asyncio.sleep(max(0.0, first["conversationExpires"] - 3 - time.time()))
    _, second = await call("POST", follow, {"body": "two"})
    assert second["status"] == "success"
    assert second["conversationExpires"] > first["conversationExpires"]
    await asyncio.sleep(max(0.0, first["conversationExpires"] + 0.5 - time.time()))
    _, third = await call("POST", follow, {"body": "three"})  # past the first expiry
    assert third["status"] == "success"


async def test_a_conversation_belongs_to_its_space_and_its_protocol(weather, responders):
    server = await weather()
    await responders(server)
    await responders(server, "sunny-agent", space="sunny")
    doc_hash = hash_document(WEATHER_DOC)
    _, first = await call(
        "POST", agora(server), {"body": "one", "multiround": True, "protocolHash": doc_hash}
    )
    cid = first["conversationId"]
    other_space = f"{server.http_url}/agora/sunny/conversations/{cid}"
    assert await call("POST", other_space, {"body": "x"}) == (
        200,
        {"status": "failure", "error": "Conversation not found"},
    )
    assert (await call("DELETE", other_space))[1]["error"] == "Conversation not found"
    follow = agora(server, f"/conversations/{cid}")
    # The library resends the same hash on follow-ups (base64): accepted.
    same = format_hash(doc_hash, HashForm.BASE64)
    status, reply = await call("POST", follow, {"body": "two", "protocolHash": same})
    assert (status, reply["status"]) == (200, "success")
    status, reply = await call(
        "POST", follow, {"body": "three", "protocolHash": hash_document(OTHER_DOC)}
    )
    assert status == 400 and "protocol cannot change" in reply["error"]


# ── protocols ──────────────────────────────────────────────────────────────


async def test_supported_protocols(weather, responders):
    server = await weather()
    responder = await responders(server, metadata={"agora_protocols": [ADDITION_DOC]})
    unsupported = {"status": "failure", "error": "Unsupported protocol"}
    other = hash_document(OTHER_DOC)
    assert await call("POST", agora(server), {"body": "x", "protocolHash": other}) == (
        200,
        unsupported,
    )
    # Declared in the config, in either hash form.
    for form in (HashForm.HEX, HashForm.BASE64):
        request = {"body": "x", "protocolHash": format_hash(hash_document(WEATHER_DOC), form)}
        assert (await call("POST", agora(server), request))[1]["status"] == "success"
    # Registered by a member.
    request = {"body": "2 + 2", "protocolHash": hash_document(ADDITION_DOC).upper()}
    assert (await call("POST", agora(server), request))[1]["status"] == "success"
    # Carried by the request itself (a data: URI or the text).
    for source in (encode_source(OTHER_DOC), OTHER_DOC):
        request = {"body": "x", "protocolHash": other, "protocolSources": [source]}
        assert (await call("POST", agora(server), request))[1]["status"] == "success"
    hashes = [e["data"]["protocolHash"] for e in responder.seen]
    assert hashes == [hash_document(WEATHER_DOC)] * 2 + [hash_document(ADDITION_DOC)] + [other] * 2
    assert responder.seen[-1]["data"]["protocolSources"] == [OTHER_DOC]
    # A source that does not hash to the claimed protocol proves nothing.
    request = {"body": "x", "protocolHash": other, "protocolSources": [WEATHER_DOC]}
    assert await call("POST", agora(server), request) == (200, unsupported)


async def test_wellknown_lists_declared_and_registered_documents(weather, responders):
    server = await weather()
    assert await call("GET", agora(server, "/wellknown")) == (
        200,
        {hash_document(WEATHER_DOC): [WEATHER_DOC]},
    )
    await responders(server, metadata={"agora_protocols": [ADDITION_DOC, 42, ""]})
    expected = {
        hash_document(WEATHER_DOC): [WEATHER_DOC],
        hash_document(ADDITION_DOC): [ADDITION_DOC],
    }
    # The bridge hears of the join from a space.members event, which may be
    # coalesced with others for up to member_events_interval: wait for it.
    async with asyncio.timeout(10):
        while (listed := await call("GET", agora(server, "/wellknown"))) != (200, expected):
            assert listed[0] == 200 and set(listed[1]) <= set(expected)
            await asyncio.sleep(0.05)
    assert await call("GET", f"{server.http_url}/agora/sunny/wellknown") == (200, {})
    status, _ = await call("GET", f"{server.http_url}/agora/quiet/wellknown")
    assert status == 404


# ── timeouts and bounds ────────────────────────────────────────────────────


async def test_no_answer_is_a_timeout_and_opens_no_conversation(weather, responders):
    server = await weather(bridge_timeout=0.5)
    silent = await responders(server, answer=lambda d: None)
    status, reply = await call("POST", agora(server), {"body": "anyone?", "multiround": True})
    assert (status, reply) == (200, {"status": "failure", "error": "Timeout"})
    cid = silent.seen[0]["data"]["conversation_id"]
    assert cid is not None
    follow = agora(server, f"/conversations/{cid}")
    assert (await call("POST", follow, {"body": "x"}))[1]["error"] == "Conversation not found"


async def test_waiting_requests_are_bounded(weather, responders):
    # One client takes every slot: no per-caller share here (test_authz_isolation's).
    server = await weather(InboundOptions(max_waiting=2), bridge_timeout=60, caller_share=1)
    late = await responders(server, answer=lambda d: None)  # answers by hand below
    waiting = [
        asyncio.create_task(call("POST", agora(server), {"body": f"w{n}"})) for n in range(2)
    ]
    seen = await late.wait_seen(2)  # both are published and waiting
    status, reply = await call("POST", agora(server), {"body": "one too many"})
    assert status == 503 and reply["status"] == "failure"
    assert late.client is not None
    for event in seen:
        data = {"in_reply_to": event["event_id"], "body": "late " + event["data"]["body"]}
        await late.client.send({"type": "space.publish", "space": SPACE, "data": data})
    replies = sorted([(await w)[1]["body"] for w in waiting])
    assert replies == ["late w0", "late w1"]
    await responders(server, "helper")
    assert await call("POST", agora(server), {"body": "room"}) == (
        200,
        {"status": "success", "body": "echo:room"},
    )


async def test_the_bridge_obeys_the_rate_limit(weather, responders):
    server = await weather(bridge_rate_limit=0.1, bridge_rate_burst=3)
    await responders(server)
    # The burst covers the two joins and one publish; the next publish is refused.
    assert (await call("POST", agora(server), {"body": "one"}))[0] == 200
    status, reply = await call("POST", agora(server), {"body": "two"})
    assert status == 429 and reply["status"] == "failure"


# ── bad input ──────────────────────────────────────────────────────────────


DEEP = (
    "JSON nested deeper than 63 levels: published, it sits 1 level down in an event, "
    "and an event nests at most 64"
)


@pytest.mark.parametrize(
    ("raw", "expected_status", "expected_error"),
    [
        (b"not json", 400, "malformed JSON"),
        (b'{"body": "x"', 400, "malformed JSON"),
        (b"\xff\xfe", 400, "malformed JSON"),
        (b'["body"]', 400, "the request must be a JSON object"),
        (b'"body"', 400, "the request must be a JSON object"),
        (b"{}", 200, "Missing field 'body'"),
        (b'{"body": 3}', 400, "body must be a string or an object"),
        (b'{"body": "x", "protocolHash": "nope"}', 200, "Unsupported protocol"),
        (b'{"body": "x", "protocolHash": 5}', 400, "protocolHash must be a string or null"),
        (b'{"body": "x", "multiround": "yes"}', 400, "multiround must be true or false"),
        (b"[" * 100_000, 400, DEEP),
        (b'{"body": ' + b'{"a": ' * 63 + b"1" + b"}" * 64, 400, DEEP),
    ],
)
async def test_bad_requests(weather, responders, raw, expected_status, expected_error):
    server = await weather()
    responder = await responders(server)
    status, reply = await call("POST", agora(server), raw=raw)
    assert (status, reply) == (expected_status, {"status": "failure", "error": expected_error})
    assert responder.seen == []  # nothing reached the space
    assert (await call("POST", agora(server), {"body": "still here"}))[1]["status"] == "success"


async def test_a_10_mb_body_is_refused_and_the_hub_keeps_serving(weather, responders):
    server = await weather()
    await responders(server)
    raw = b'{"body": "' + b"x" * (10 * 1024 * 1024) + b'"}'
    # Refused from its Content-Length, before it is read.
    status, reply = await call("POST", agora(server), raw=raw)
    assert (status, reply["status"]) == (413, "failure")
    # Sent chunked, without a Content-Length: refused while reading.
    status, reply = await _post_chunked(agora(server), raw)
    assert (status, reply["status"]) == (413, "failure")
    assert (await call("POST", agora(server), {"body": "still here"}))[1]["status"] == "success"


async def _post_chunked(url: str, raw: bytes) -> tuple[int, Any]:
    """A body without Content-Length: the bound holds while reading."""
    import aiohttp

    async def chunks() -> Any:
        for i in range(0, len(raw), 256 * 1024):
            yield raw[i : i + 256 * 1024]

    async with aiohttp.ClientSession() as session, session.post(url, data=chunks()) as resp:
        return resp.status, await resp.json()


@pytest.mark.parametrize(
    "path",
    [
        "/agora/quiet",  # declared, not opted in
        "/agora/nowhere",  # not declared at all
        "/agora/quiet/conversations/" + "a" * 32,
    ],
)
async def test_unknown_spaces_are_404(weather, path):
    server = await weather()
    status, reply = await call("POST", f"{server.http_url}{path}", {"body": "x"})
    assert status == 404 and reply["status"] == "failure"


@pytest.mark.parametrize("cid", ["short", "a" * 31 + "!", "a" * 33, "a" * 31 + "%20", "a." * 16])
async def test_malformed_conversation_ids_are_not_found(weather, cid):
    server = await weather()
    for method in ("POST", "DELETE"):
        status, reply = await call(method, agora(server, f"/conversations/{cid}"), {"body": "x"})
        assert (status, reply) == (200, {"status": "failure", "error": "Conversation not found"})


# ── one node answering for another ─────────────────────────────────────────


@pytest.mark.redis
async def test_follow_up_on_the_other_node_of_a_cluster(weather, responders, redis_server):
    settings = {"redis_url": redis_server.url}
    one = await weather(**settings)
    two = await weather(**settings)
    # The agent sits on node two and registers a document there.
    responder = await responders(two, metadata={"agora_protocols": [ADDITION_DOC]})
    request = {"body": "one", "multiround": True, "protocolHash": hash_document(ADDITION_DOC)}
    status, first = await call("POST", agora(one), request)
    assert status == 200 and first["body"] == "echo:one"
    cid = first["conversationId"]
    status, second = await call("POST", agora(two, f"/conversations/{cid}"), {"body": "two"})
    assert (status, second["body"], second["conversationId"]) == (200, "echo:two", cid)
    status, third = await call("POST", agora(one, f"/conversations/{cid}"), {"body": "three"})
    assert third["body"] == "echo:three"
    assert await call("DELETE", agora(two, f"/conversations/{cid}")) == (
        200,
        {"status": "success"},
    )
    refused = await call("POST", agora(one, f"/conversations/{cid}"), {"body": "four"})
    assert refused == (200, {"status": "failure", "error": "Conversation not found"})
    # Either node lists what a member registered anywhere.
    _, listed = await call("GET", agora(one, "/wellknown"))
    assert hash_document(ADDITION_DOC) in listed
    assert [e["data"]["body"] for e in responder.seen if "body" in e["data"]] == [
        "one",
        "two",
        "three",
    ]


async def test_echo_answer_helper_is_what_the_tests_assume():
    assert echo_answer({"body": "a"}) == {"body": "echo:a"}
    assert echo_answer({"body": {"a": 1}}) == {"body": {"echo": {"a": 1}}}
    assert echo_answer({"end_conversation": True}) is None


async def test_waiting_requests_get_503_when_the_hub_shuts_down(weather, responders):
    server = await weather(bridge_timeout=60)
    silent = await responders(server, answer=lambda d: None)
    waiting = asyncio.create_task(call("POST", agora(server), {"body": "anyone?"}))
    await silent.wait_seen(1)
    started = time.monotonic()
    await server.aclose()
    status, reply = await waiting
    assert status == 503 and reply["error"] == "Hub shutting down: try again"
    assert time.monotonic() - started < 30  # answered at once, not after bridge_timeout
