"""Frames as they come off the socket: whole, cut anywhere, fragmented, mixed
with control frames — every message arrives whole and in order (the hub reads
whole plain frames itself, websockets' parser the rest: hub.net.inbox)."""

from __future__ import annotations

import orjson
from websockets.frames import BINARY, CONT, PING, TEXT, Frame

from tests.support.wsclient import WsClient


def _wire(frame: Frame) -> bytes:
    return frame.serialize(mask=True, extensions=[])


def _publish(n: int, text: str = "") -> bytes:
    return orjson.dumps(
        {"type": "space.publish", "space": "general", "data": {"n": n, "text": text}}
    )


async def test_messages_cut_fragmented_and_batched_arrive_whole_and_in_order(hub):
    server = await hub()
    c = await WsClient.connect(server.url, "alice")
    await c.join("general")
    second = _publish(2)
    last = _wire(Frame(TEXT, _publish(5)))
    batch = (
        _wire(Frame(TEXT, _publish(1)))
        # A fragmented message with a ping between its fragments.
        + _wire(Frame(TEXT, second[:10], fin=False))
        + _wire(Frame(PING, b"between"))
        + _wire(Frame(CONT, second[10:]))
        + _wire(Frame(TEXT, _publish(3)))
        + _wire(Frame(TEXT, _publish(4, "x" * 400)))  # a 16-bit length
        + last[:7]  # cut inside the mask
    )
    c.ws.transport.write(batch)
    got = [(await c.wait_for("space.event"))["data"]["n"] for _ in range(4)]
    assert got == [1, 2, 3, 4]
    c.ws.transport.write(last[7:])
    assert (await c.wait_for("space.event"))["data"]["n"] == 5
    # The connection is still in step: a binary frame is refused as always,
    # then a text message is served.
    c.ws.transport.write(_wire(Frame(BINARY, b"\x00\x01")))
    err = await c.wait_for("error")
    assert err["code"] == "INVALID_REQUEST" and "binary" in err["message"]
    reply = await c.request({"type": "space.publish", "space": "general", "data": {"n": 6}})
    assert reply["data"]["n"] == 6
    await c.close()


async def test_log_level_debug_shows_websockets_frame_lines(hub_process):
    """``--log-level debug`` takes websockets' logger to DEBUG: its line for
    every frame of a connection (websockets' parser then reads every frame);
    at ``info`` none of them."""
    for level, shown in (("debug", True), ("info", False)):
        proc = hub_process(log_level=level)
        c = await WsClient.connect(proc.url, f"logged-{level}")
        await c.join("general")
        await c.request({"type": "space.publish", "space": "general", "data": {"n": 1}})
        await c.close()
        frames = [
            line
            for line in proc.log_lines()
            if str(line.get("logger", "")).startswith("websockets")
            and str(line.get("event", "")).startswith("< TEXT")
        ]
        assert bool(frames) is shown, (level, frames[:3])
        if shown:
            assert any("space.publish" in line["event"] for line in frames)
