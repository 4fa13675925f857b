from tests.support.wsclient import WsClient


async def test_publish_reaches_other_member_and_echoes(hub):
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    await a.join("general")
    await b.join("general")
    reply = await a.request({"type": "space.publish", "space": "general", "data": {"text": "hi"}})
    assert reply["type"] == "space.event" and reply["data"] == {"text": "hi", "from": "alice"}
    got = await b.wait_for("space.event")
    assert got["event_id"] == reply["event_id"] and got["seq"] == reply["seq"]
    await a.close()
    await b.close()
