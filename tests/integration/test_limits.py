"""Every limit, hit on purpose; the hub keeps serving everyone else."""

import asyncio
import random

import orjson

from tests.support.wsclient import WsClient
from tests.support.wsframes import RawFrame


async def test_frame_over_max_gets_error_then_1009(hub):
    server = await hub(max_frame_bytes=4096)
    c = await WsClient.connect(server.url, "alice")
    await c.send("x" * 5000)
    code, frames = await c.closed()
    assert code == 1009
    assert frames[-1]["type"] == "error" and frames[-1]["code"] == "INVALID_REQUEST"
    assert "too big" in frames[-1]["message"]
    # Just under the limit is fine.
    d = await WsClient.connect(server.url, "bob")
    await d.join("general")
    reply = await d.request(
        {"type": "space.publish", "space": "general", "data": {"text": "y" * 3900}}
    )
    assert reply["type"] == "space.event"
    await d.close()


async def test_rate_limit_refuses_and_does_not_deliver(hub):
    server = await hub(rate_limit=5, rate_burst=10, rate_abuse_seconds=60)
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    await a.join("general")  # 1 token
    await b.join("general")
    for n in range(15):
        await a.send({"type": "space.publish", "id": f"p{n}", "space": "general", "data": {"n": n}})
    replies = []
    while len(replies) < 15:
        msg = await a.recv()
        if msg["type"] in ("space.event", "error"):
            replies.append(msg)
    limited = [r for r in replies if r["type"] == "error"]
    assert limited and all(r["code"] == "RATE_LIMITED" for r in limited)
    delivered = [r for r in replies if r["type"] == "space.event"]
    assert len(delivered) + len(limited) == 15 and len(delivered) <= 10
    # bob got exactly the events that were not refused
    got = [await b.wait_for("space.event") for _ in delivered]
    assert [g["request_id"] for g in got] == [d["request_id"] for d in delivered]
    refused_ids = {r["request_id"] for r in limited}
    assert refused_ids.isdisjoint(g["request_id"] for g in got)
    assert a.ws.close_code is None
    await a.close()
    await b.close()


async def test_sustained_abuse_closes_4429(hub):
    server = await hub(rate_limit=20, rate_burst=20, rate_abuse_seconds=0.5)
    c = await WsClient.connect(server.url, "flood")
    loop = asyncio.get_running_loop()
    started = loop.time()
    sent = 0
    try:
        # Far above the rate, kept up: 20 messages every 10 ms (100x the rate).
        while loop.time() - started < 20:
            for _ in range(20):
                sent += 1
                await c.ws.send(
                    orjson.dumps({"type": "agent.heartbeat", "id": f"h{sent}"}).decode()
                )
            await asyncio.sleep(0.01)
    except Exception:
        pass  # the hub closed while we were still sending
    code, frames = await c.closed()
    assert code == 4429
    # Sustained: not before rate_abuse_seconds of wall time.
    assert loop.time() - started >= 0.5
    close_error = frames[-1]
    assert close_error["type"] == "error" and close_error["code"] == "RATE_LIMITED"
    # Every refused message was answered with its own request id first.
    refused = [f for f in frames[:-1] if f["type"] == "error"]
    assert refused and all(f["code"] == "RATE_LIMITED" and f["request_id"] for f in refused)


async def test_a_burst_is_refused_message_by_message_and_never_closes(hub):
    """Regression: 30 publishes at once with rate 5/burst 5 closed the connection (4429)."""
    server = await hub(rate_limit=5, rate_burst=5)
    c = await WsClient.connect(server.url, "bursty")
    await c.join("general")
    for n in range(30):
        await c.send({"type": "space.publish", "id": f"p{n}", "space": "general", "data": {"n": n}})
    answers = {}
    while len(answers) < 30:
        msg = await c.recv()
        rid = msg.get("request_id")
        if rid is not None:
            answers[rid] = msg
    assert set(answers) == {f"p{n}" for n in range(30)}
    limited = [m for m in answers.values() if m["type"] == "error"]
    assert len(limited) >= 25 and all(m["code"] == "RATE_LIMITED" for m in limited)
    # Still open and served once the bucket refills.
    reply = await c.request({"type": "agent.heartbeat"}, timeout=10)
    while reply["type"] == "error":  # a token comes back every 200 ms
        await asyncio.sleep(0.05)
        reply = await c.request({"type": "agent.heartbeat"}, timeout=10)
    assert reply["type"] == "agent.heartbeat"
    assert c.ws.close_code is None
    await c.close()


async def test_slow_consumer_is_closed_4008_and_others_keep_receiving(hub):
    server = await hub(
        outbox_max_bytes=1_048_576, max_frame_bytes=262_144, rate_limit=10_000, rate_burst=10_000
    )
    pub = await WsClient.connect(server.url, "pub")
    fast = await WsClient.connect(server.url, "fast")
    slow = await WsClient.connect(server.url, "slow")
    for c in (pub, fast, slow):
        await c.join("firehose")
    slow.ws.transport.pause_reading()  # a consumer that stopped reading
    payload = "z" * 30_000
    n = 600  # ~18 MB: more than the kernel's socket buffers can hide
    received = 0
    for i in range(n):
        await pub.send(
            {
                "type": "space.publish",
                "space": "firehose",
                "echo": False,
                "data": {"text": payload, "i": i},
            }
        )
        if i % 20 == 19:  # the fast consumer keeps up: read what was sent so far
            while received < i + 1:
                msg = await fast.recv(timeout=30)
                if msg["type"] == "space.event":
                    assert msg["data"]["i"] == received
                    received += 1
    assert received == n
    slow.ws.transport.resume_reading()
    code, frames = await slow.closed(timeout=30)
    assert code == 4008
    assert frames[-1]["type"] == "error" and frames[-1]["code"] == "SLOW_CONSUMER"
    assert server.node.counters.slow_consumer_closes == 1
    await pub.close()
    await fast.close()


async def test_a_client_that_pings_and_never_reads_is_a_slow_consumer(hub):
    """websockets answers every ping with a pong written straight to the
    socket; a client that pings without reading would grow the hub's memory
    by what it sends (found by an outside audit: 297 MB after 180 MB of pings,
    never closed). The pongs count against ``outbox_max_bytes``: 4008."""
    server = await hub(outbox_max_bytes=65_536, max_frame_bytes=32_768)
    pinger = await WsClient.connect(server.url, "pinger")
    pinger.ws.transport.pause_reading()  # it never reads its pongs
    ping = RawFrame(0x89, b"p" * 125, key=b"\x01\x02\x03\x04").wire
    batch = ping * 1000
    counters = server.node.counters
    sent = 0
    while counters.slow_consumer_closes == 0 and sent < 48_000_000:
        transport = pinger.ws.transport
        if transport.is_closing():
            break
        transport.write(batch)
        sent += len(batch)
        await asyncio.sleep(0)  # the hub (same loop) reads between batches
    assert counters.slow_consumer_closes == 1, f"not closed after {sent} bytes of pings"
    pinger.ws.transport.resume_reading()
    code, frames = await pinger.closed(timeout=30)
    assert code == 4008
    assert frames[-1]["type"] == "error" and frames[-1]["code"] == "SLOW_CONSUMER"


async def test_garbage_never_breaks_the_hub(hub):
    server = await hub(rate_limit=100_000, rate_burst=100_000, max_frame_bytes=262_144)
    rng = random.Random(1234)
    c = await WsClient.connect(server.url, "fuzz")
    await c.join("general")
    frames = [
        "[" * 100_000,
        '{"a":' * 5000 + "1" + "}" * 5000,
        '{"type":"space.publish","space":"general","data":' + "[" * 3000 + "]" * 3000 + "}",
        '{"type":"space.publish","space":"general","data":{"n":1e999}}',
        '{"type":"space.join","space":null}',
        '{"type":"space.join","space":["general"]}',
        '{"type":"agent.register","agent":"me"}',
        '{"type":"agent.register","agent":{"id":"fuzz","capabilities":"x"}}',
        '{"type":"space.event.delta","space":"general","event_id":5,"data":{}}',
        '{"type":"space.event.cancel","space":"general","event_id":"nobody/x"}',
        '{"type":["space.join"]}',
        '{"type":"space.list","id":{"x":1}}',
        '"\\ud800"',
        "\x00\x01\x02",
        "",
        "null",
        "1e5",
    ]
    frames += [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200))) for _ in range(50)]
    frames += [
        "".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(1, 100))) for _ in range(50)
    ]
    for frame in frames:
        await c.send(frame)
    for _ in frames:
        reply = await c.recv()
        assert reply["type"] == "error", reply
        assert reply["code"] in {"INVALID_REQUEST"}, reply
    # Same connection still works, and so does a new one.
    echo = await c.request({"type": "space.publish", "space": "general", "data": {"ok": True}})
    assert echo["type"] == "space.event"
    other = await WsClient.connect(server.url, "after")
    assert (await other.join("general"))["member_count"] == 2
    await c.close()
    await other.close()
