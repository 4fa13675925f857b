"""The outbound A2A bridge on a real hub, against a remote under test control:
the card (read, re-read while down), calls and their answers, failures of
every kind, cancel, bounds, and only the configured URL ever called."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.a2a import A2aOutbound, OutboundOptions
from tests.support.a2a_remote import RemoteA2a
from tests.support.agora_bridge import write_config
from tests.support.wsclient import WsClient

SPACE = "lab"
BRIDGE = "translator"


@pytest.fixture
async def remotes() -> AsyncIterator[Any]:
    started: list[RemoteA2a] = []

    async def _start(**options: Any) -> RemoteA2a:
        remote = await RemoteA2a(**options).start()
        started.append(remote)
        return remote

    yield _start
    for remote in started:
        await remote.stop()


def bridge(url: str, *, timeout: float | None = None, **options: Any) -> A2aOutbound:
    options.setdefault("flush_interval", 0.02)
    options.setdefault("card_retry", 0.05)
    return A2aOutbound(
        SPACE, BRIDGE, url, timeout=timeout, headers={"X-Api-Key": "k1"},
        options=OutboundOptions(**options),
    )  # fmt: skip


async def hosting(hub: Any, outbound: A2aOutbound) -> Any:
    """A hub hosting ``outbound``, once the bridge has read the remote's card."""
    server = await hub(adapters=[outbound])
    await outbound.card_read.wait()
    return server


async def member(server: Any, agent_id: str = "alice") -> WsClient:
    client = await WsClient.connect(server.url, agent_id, heartbeat=True)
    await client.join(SPACE)
    return client


async def send(client: WsClient, data: dict[str, Any]) -> str:
    sent = await client.request(
        {"type": "space.publish", "space": SPACE, "to": BRIDGE, "data": data}
    )
    assert sent["type"] == "space.event", sent
    return str(sent["event_id"])


async def answer_to(client: WsClient, event_id: str, timeout: float = 15) -> dict[str, Any]:
    """The bridge's answer: a whole event, or a stream put back together."""
    first = await client._until(
        lambda m: m.get("from") == BRIDGE and (m.get("data") or {}).get("in_reply_to") == event_id,
        timeout,
    )
    if first["type"] == "space.event":
        return first
    text, frames = first["data"]["text"], 1
    while True:
        frame = await client._until(lambda m: m.get("event_id") == first["event_id"], timeout)
        if frame["type"] != "space.event.delta":
            break
        text += frame["data"]["text"]
        frames += 1
    return {**first, "type": frame["type"], "text": text, "frames": frames, "end": frame}


async def ask(client: WsClient, data: dict[str, Any]) -> dict[str, Any]:
    return await answer_to(client, await send(client, data))


async def test_the_bridge_calls_the_remote_and_answers(hub, remotes):
    remote = await remotes()
    outbound = bridge(remote.url)
    server = await hosting(hub, outbound)
    alice = await member(server)
    listed = await alice.request({"type": "agent.list", "capability": "translate"})
    (found,) = listed["agents"]
    assert found["id"] == BRIDGE and found["capabilities"] == ["translate", "summarize"]
    assert found["metadata"]["a2a"]["name"] == "Remote translator"
    plain = await ask(alice, {"text": "hello", "context_id": "c1"})
    assert plain["to"] in ("alice", ["alice"])
    assert plain["data"] == {
        "in_reply_to": plain["data"]["in_reply_to"], "status": "success", "text": "echo:hello",
        "task_id": plain["data"]["task_id"], "context_id": "c1", "from": BRIDGE,
    }  # fmt: skip
    call = remote.calls[-1]
    assert call["method"] == "SendStreamingMessage" and call["headers"]["X-Api-Key"] == "k1"
    assert call["headers"]["A2A-Version"] == "1.0"
    assert call["params"]["message"]["parts"] == [{"text": "hello"}]
    assert call["params"]["message"]["role"] == "ROLE_USER"
    data = await ask(alice, {"body": {"q": 1}, "context_id": "c1"})
    assert data["data"]["status"] == "success"
    sent = remote.calls[-1]["params"]["message"]
    assert sent["parts"] == [{"data": {"q": 1}}]
    assert sent["contextId"] == remote.calls[0]["params"]["message"].get("contextId") or (
        sent["contextId"] == "ctx-" + plain["data"]["task_id"]
    )
    nothing = await ask(alice, {"note": "no text"})
    assert nothing["data"]["error"] == "The event has nothing to send (text, body or data)"
    await alice.close()


async def test_streamed_chunks_become_a_coalesced_client_stream(hub, remotes):
    remote = await remotes()
    outbound = bridge(remote.url, flush_interval=0.05)
    server = await hosting(hub, outbound)
    alice, bob = await member(server), await member(server, "bob")
    streamed = await ask(alice, {"text": "slow:300"})
    assert streamed["type"] == "space.event.done"
    # Addressed to its sender: a bystander sees none of the stream.
    marker = await bob.request({"type": "space.publish", "space": SPACE, "data": {"n": 1}})
    assert marker["type"] == "space.event"
    assert not [m for m in bob.backlog if m.get("from") == BRIDGE]
    assert streamed["text"] == "".join(f"{n}," for n in range(300))
    assert 1 < streamed["frames"] < 300  # coalesced, so the rate limit is never hit
    assert streamed["data"]["task_id"] and streamed["data"]["context_id"]
    # Complete before the first flush: one plain answer, no stream.
    quick = await ask(alice, {"text": "chunks:300"})
    assert quick["type"] == "space.event" and quick["data"]["status"] == "success"
    assert quick["data"]["text"] == "".join(f"{n}," for n in range(300))
    await alice.close()
    await bob.close()


async def test_input_required_round_trip_only_for_its_sender(hub, remotes):
    remote = await remotes()
    outbound = bridge(remote.url)
    server = await hosting(hub, outbound)
    alice, bob = await member(server), await member(server, "bob")
    question = await ask(alice, {"text": "ask"})
    assert question["data"]["state"] == "input-required"
    assert question["data"]["text"] == "which city?"
    task_id = question["data"]["task_id"]
    stolen = await ask(bob, {"text": "Oslo", "task_id": task_id})
    assert stolen["data"]["status"] == "failure" and "No task" in stolen["data"]["error"]
    answer = await ask(alice, {"text": "Oslo", "task_id": task_id})
    assert answer["data"]["status"] == "success"
    assert remote.calls[-1]["params"]["message"]["taskId"] == task_id
    await alice.close()
    await bob.close()


async def test_a_remote_that_fails_in_every_way(hub, remotes):
    remote = await remotes()
    elsewhere = await remotes()
    remote.redirect_to = f"{elsewhere.url}/"
    outbound = bridge(remote.url, timeout=1.0)
    server = await hosting(hub, outbound)
    alice = await member(server)
    expected = {
        "rpc-error": "The remote refused: the remote broke (-32603)",
        "http500": "The remote answered HTTP 500 without JSON",
        "garbage": "The remote answered HTTP 200 without JSON",
        "redirect": "The remote answered HTTP 307 without JSON",
        "hang": "Timeout",
    }
    for text, error in expected.items():
        answer = await ask(alice, {"text": text})
        if answer["type"] == "space.event.cancel":  # a stream had begun: it is cut, then failed
            answer = await answer_to(alice, answer["data"]["in_reply_to"])
        assert answer["data"]["status"] == "failure", (text, answer)
        assert answer["data"]["error"] == error, text
    assert elsewhere.calls == []  # redirects are not followed
    await remote.stop()  # down: the call fails at once, and the card is read again
    reads = remote.card_reads
    down = await ask(alice, {"text": "hello"})
    assert down["data"]["error"] == "Could not connect to the remote A2A agent"
    await remote.start()
    async with asyncio.timeout(10):
        while remote.card_reads == reads:  # re-read while it was down, until it is back
            outbound.card_read.clear()
            await outbound.card_read.wait()
    assert (await ask(alice, {"text": "back"}))["data"]["text"] == "echo:back"
    await alice.close()


async def test_a_remote_down_at_start_is_read_once_it_is_up(hub, remotes):
    remote = await remotes()
    port = remote.port
    await remote.stop()
    outbound = bridge(remote.url)
    server = await hub(adapters=[outbound])
    await asyncio.wait_for(outbound.held.wait(), 10)
    alice = await member(server)
    early = await ask(alice, {"text": "hello"})
    assert early["data"]["error"].startswith("Remote A2A agent unavailable")
    listed = await alice.request({"type": "agent.list", "capability": "translate"})
    assert listed["agents"] == []
    remote.port = port
    await remote.start()
    await asyncio.wait_for(outbound.card_read.wait(), 10)
    listed = await alice.request({"type": "agent.list", "capability": "translate"})
    assert [a["id"] for a in listed["agents"]] == [BRIDGE]
    assert (await ask(alice, {"text": "hello"}))["data"]["text"] == "echo:hello"
    await alice.close()


async def test_only_the_configured_origin_is_called(hub, remotes):
    elsewhere = await remotes()
    remote = await remotes(interface=f"{elsewhere.url}/")  # its card points somewhere else
    outbound = bridge(remote.url)
    server = await hosting(hub, outbound)
    alice = await member(server)
    assert (await ask(alice, {"text": "hello"}))["data"]["text"] == "echo:hello"
    assert remote.methods() == ["SendStreamingMessage"] and elsewhere.calls == []
    await alice.close()


async def test_a_non_streaming_remote_gets_send_message(hub, remotes):
    remote = await remotes(streaming=False)
    outbound = bridge(remote.url)
    server = await hosting(hub, outbound)
    alice = await member(server)
    assert (await ask(alice, {"text": "hi"}))["data"]["text"] == "echo:hi"
    later = await ask(alice, {"text": "working"})  # answered WORKING: looked at again
    assert later["data"]["text"] == "done later"
    assert remote.methods() == ["SendMessage", "SendMessage", "GetTask"]
    await alice.close()


async def test_a_sender_cancels_a_call(hub, remotes):
    remote = await remotes()
    outbound = bridge(remote.url, timeout=20)
    server = await hosting(hub, outbound)
    alice = await member(server)
    request = await send(alice, {"text": "hang"})
    first = await first_frame(alice, request)
    assert first["type"] == "space.event.delta" and first["data"]["text"] == "working… "
    cancel = await send(alice, {"cancel": True, "event_id": request})
    done = await answer_to(alice, cancel)
    assert done["data"]["status"] == "success" and done["data"]["state"] == "canceled"
    assert done["data"]["task_id"] == first["data"]["task_id"]
    assert "CancelTask" in remote.methods()
    cut = await alice._until(lambda m: m.get("event_id") == first["event_id"]
                             and m["type"] == "space.event.cancel", 15)  # fmt: skip
    assert "Cancelled" in cut["reason"]
    failed = await alice._until(
        lambda m: (
            m.get("type") == "space.event" and (m.get("data") or {}).get("in_reply_to") == request
        ),
        15,
    )
    assert failed["data"]["error"] == "Cancelled"
    nothing = await ask(alice, {"cancel": True, "task_id": "not-mine"})
    assert nothing["data"]["error"] == "Nothing of yours to cancel"
    await alice.close()


async def test_a_senders_cancel_of_the_reply_stream_cancels_the_remote_task(hub, remotes):
    """Contract §13: the sender's ``space.event.cancel`` of the reply stream (a
    receiver's cancel) → ``CancelTask`` on the remote; the stream is relayed no more."""
    remote = await remotes()
    outbound = bridge(remote.url, timeout=20)
    server = await hosting(hub, outbound)
    alice = await member(server)
    request = await send(alice, {"text": "hang"})
    first = await alice._until(
        lambda m: m.get("from") == BRIDGE and (m.get("data") or {}).get("in_reply_to") == request,
        15,
    )
    assert first["type"] == "space.event.delta"
    stopped = await alice.request(
        {"type": "space.event.cancel", "space": first["space"], "event_id": first["event_id"]}
    )
    assert stopped["reason"] == "receiver_cancelled"
    async with asyncio.timeout(15):
        while "CancelTask" not in remote.methods():
            remote.called.clear()
            if "CancelTask" not in remote.methods():
                await remote.called.wait()
    await alice.close()


async def test_the_bridge_holds_its_agent_id_once_started(hub, remotes):
    """Claimed at start, as every outbound bridge (adapters/kit/bridge.py)."""
    remote = await remotes()
    server = await hub()
    outbound = bridge(remote.url)
    await outbound.start(server.node.host)
    try:
        assert outbound.held.is_set() and outbound.member is not None
    finally:
        await outbound.aclose()


async def test_a_sender_that_stops_waiting_cancels_the_remote_task(hub, remotes):
    """Contract §19: ``{cancel: true, in_reply_to}`` (what the hub's inbound faces
    send when their caller goes away) → the call stops, ``CancelTask`` on the remote."""
    remote = await remotes()
    outbound = bridge(remote.url, timeout=20)
    server = await hosting(hub, outbound)
    alice = await member(server)
    request = await send(alice, {"text": "hang"})
    first = await alice._until(
        lambda m: m.get("from") == BRIDGE and (m.get("data") or {}).get("in_reply_to") == request,
        15,
    )
    assert first["type"] == "space.event.delta"
    await send(alice, {"cancel": True, "in_reply_to": request})
    cut = await alice._until(lambda m: m.get("event_id") == first["event_id"]
                             and m["type"] == "space.event.cancel", 15)  # fmt: skip
    assert "Cancelled" in cut["reason"]
    async with asyncio.timeout(15):
        while "CancelTask" not in remote.methods():
            remote.called.clear()
            if "CancelTask" not in remote.methods():
                await remote.called.wait()
    await alice.close()


async def test_bounds_on_queue_and_bodies(hub, remotes):
    remote = await remotes()
    outbound = bridge(
        remote.url, timeout=20, max_concurrency=1, max_queued=0, max_body_bytes=50_000
    )
    server = await hosting(hub, outbound)
    alice = await member(server)
    big = await ask(alice, {"text": "big"})  # one stream event of 100 KB
    assert big["data"]["status"] == "failure" and "exceeds 50000 bytes" in big["data"]["error"]
    hanging = await send(alice, {"text": "hang"})
    await alice._until(lambda m: (m.get("data") or {}).get("in_reply_to") == hanging, 15)
    busy = await ask(alice, {"text": "hello"})
    assert busy["data"]["error"] == "Bridge busy: try again"
    await alice.close()


async def test_a_streamed_answer_over_the_bound_is_cut(hub, remotes):
    remote = await remotes()
    outbound = bridge(remote.url, max_reply_bytes=100, flush_interval=0.001)
    server = await hosting(hub, outbound)
    alice = await member(server)
    cut = await ask(alice, {"text": "slow:200"})
    assert cut["type"] == "space.event.cancel" and "exceeds 100 bytes" in cut["end"]["reason"]
    await alice.close()


async def test_the_config_file_makes_the_bridge(hub, remotes, tmp_path):
    remote = await remotes()
    config = write_config(
        tmp_path / "hub.toml",
        f'[[bridges.a2a]]\nspace = "{SPACE}"\nagent_id = "{BRIDGE}"\nurl = "{remote.url}"\n'
        'timeout = 5\nheaders = {Authorization = "Bearer remote-token"}\n',
    )
    server = await hub(config=str(config))
    alice = await member(server)
    async with asyncio.timeout(10):
        while True:
            answer = await ask(alice, {"text": "hello"})
            if answer["data"].get("status") == "success":
                break  # the card is read in the background
    assert remote.calls[-1]["headers"]["Authorization"] == "Bearer remote-token"
    await alice.close()


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('space = "lab"\nagent_id = "x"\nurl = "ftp://h"', "url must be an http"),
        ('space = "agent.x"\nagent_id = "x"\nurl = "http://h"', "not a user space"),
        ('space = "lab"\nagent_id = "a2a"\nurl = "http://h"', "not a usable agent id"),
        ('space = "lab"\nagent_id = "x"\nurl = "http://h"\ntimout = 3', "did you mean timeout"),
        ('space = "lab"\nagent_id = "x"\nurl = "http://h"\nheaders = {"a\\nb" = "c"}',
         "not a valid HTTP header"),
    ],
)  # fmt: skip
def test_config_mistakes_stop_the_hub(tmp_path, table, problem):
    from adapters import from_settings
    from hub.adapter_host import ConfigError
    from hub.config.settings import load_settings

    config = write_config(tmp_path / "hub.toml", f"[[bridges.a2a]]\n{table}\n")
    with pytest.raises(ConfigError, match=problem):
        from_settings(load_settings({}, str(config)))


# ── bounds every call keeps, cancels that reach every call ──────────────────


async def cancel_task_sent(remote: RemoteA2a) -> None:
    """Until the remote got a ``CancelTask``."""
    async with asyncio.timeout(15):
        while "CancelTask" not in remote.methods():
            remote.called.clear()
            if "CancelTask" not in remote.methods():
                await remote.called.wait()


async def dropped(remote: RemoteA2a, text: str) -> None:
    """Until the hub dropped the remote's stream for ``text``."""
    async with asyncio.timeout(15):
        while text not in remote.dropped:
            remote.called.clear()
            if text not in remote.dropped:
                await remote.called.wait()


async def first_frame(client: WsClient, request: str) -> dict[str, Any]:
    return await client._until(
        lambda m: m.get("from") == BRIDGE and (m.get("data") or {}).get("in_reply_to") == request,
        15,
    )


async def test_parts_of_every_kind_count_against_the_reply_bound(hub, remotes):
    """File (and any other) parts count at their JSON size: 1000 KiB of them
    against a 300 KB bound end the call, and the remote task is cancelled."""
    remote = await remotes()
    outbound = bridge(remote.url, max_reply_bytes=300_000)
    server = await hosting(hub, outbound)
    alice = await member(server)
    answer = await ask(alice, {"text": "files:10:100"})
    # Streamed as their JSON (a2a.md): the stream is cut, as for text.
    assert answer["type"] == "space.event.cancel", answer["type"]
    assert "exceeds 300000 bytes" in answer["end"]["reason"]
    await cancel_task_sent(remote)
    await alice.close()


async def test_parts_of_a_kind_a2a_does_not_define_are_streamed_too(hub, remotes):
    """Parts of unknown kinds within ``max_reply_bytes`` go out as the stream's
    text (their JSON), as a2a.md says, not kept back for one event: 5 MiB of
    them in one event closed the asker 4008 (a re-audit)."""
    remote = await remotes()
    outbound = bridge(remote.url)
    server = await hosting(hub, outbound)
    alice = await member(server)
    answer = await ask(alice, {"text": "files:10:500"})
    assert answer["type"] == "space.event.done", answer["type"]
    assert answer["frames"] > 1 and answer["text"].count('{"file":') == 10
    await alice.close()


async def test_keepalives_are_not_stream_events(hub, remotes):
    """``timeout`` is silence between stream events: SSE comment lines do not
    reset it, and the remote's stream is dropped."""
    remote = await remotes()
    outbound = bridge(remote.url, timeout=0.5)
    server = await hosting(hub, outbound)
    alice = await member(server)
    answer = await ask(alice, {"text": "keepalive"})
    assert answer["data"]["status"] == "failure" and answer["data"]["error"] == "Timeout"
    await dropped(remote, "keepalive")
    await alice.close()


async def test_a_call_has_a_longest_time(hub, remotes):
    """A remote that keeps saying WORKING holds a call no longer than
    ``max_call_time``: "Timeout", the stream dropped, ``CancelTask`` sent; the
    call slot is free again."""
    remote = await remotes()
    outbound = bridge(remote.url, timeout=5, max_call_time=1.0, max_concurrency=1)
    server = await hosting(hub, outbound)
    alice = await member(server)
    answer = await ask(alice, {"text": "busy"})
    assert answer["data"]["status"] == "failure" and answer["data"]["error"] == "Timeout"
    await dropped(remote, "busy")
    await cancel_task_sent(remote)
    assert (await ask(alice, {"text": "next"}))["data"]["text"] == "echo:next"
    await alice.close()


async def test_the_hubs_a2a_gateway_reaches_the_bridge(hub, remotes):
    """A2A client → the gateway's member URL → the bridge → the remote: the
    gateway's own ``task_id`` starts a remote task, and continues it after
    ``INPUT_REQUIRED``; a remote task waiting for another sender is still not
    anyone else's to continue."""
    from adapters.a2a import A2aGateway, SpaceCard
    from tests.support import a2a_http as a2a

    remote = await remotes()
    outbound = bridge(remote.url)
    server = await hub(adapters=[A2aGateway({SPACE: SpaceCard()}), outbound])
    await outbound.card_read.wait()
    url = f"{server.http_url}/a2a/{SPACE}/{BRIDGE}"
    done = await a2a.send(url, "hello")
    assert a2a.state(done) == "TASK_STATE_COMPLETED", done
    assert done["artifacts"][0]["parts"] == [{"text": "echo:hello"}]
    asked = await a2a.send(url, "ask")
    assert a2a.state(asked) == "TASK_STATE_INPUT_REQUIRED", asked
    remote_task = remote.calls[-1]  # the remote's task id is not the gateway's
    answered = await a2a.send(url, "Oslo", message=a2a.message("Oslo", taskId=asked["id"]))
    assert a2a.state(answered) == "TASK_STATE_COMPLETED", answered
    continued = remote.calls[-1]["params"]["message"]
    assert continued["taskId"] and continued["taskId"] != asked["id"]
    assert remote_task["params"]["message"].get("taskId") is None
    alice = await member(server)
    stolen = await ask(alice, {"text": "x", "task_id": "task-never"})  # unknown: a new task
    assert stolen["data"]["status"] == "success"
    await alice.close()


async def test_a_queued_request_is_dropped_on_cancel(hub, remotes):
    """All call slots busy: a request waiting for one is dropped by its
    sender's cancel — never sent to the remote. ``{cancel, event_id}`` answers
    the request "Cancelled" and the cancel ``canceled``; ``{cancel,
    in_reply_to}`` answers nothing."""
    remote = await remotes()
    outbound = bridge(remote.url, timeout=20, max_concurrency=1, max_queued=4)
    server = await hosting(hub, outbound)
    alice = await member(server)
    hanging = await send(alice, {"text": "hang"})
    await first_frame(alice, hanging)
    quiet = await send(alice, {"text": "queued-1"})
    told = await send(alice, {"text": "queued-2"})
    await send(alice, {"cancel": True, "in_reply_to": quiet})
    cancel = await send(alice, {"cancel": True, "event_id": told})
    done = await answer_to(alice, cancel)
    assert done["data"]["status"] == "success" and done["data"]["state"] == "canceled"
    failed = await answer_to(alice, told)
    assert failed["data"]["status"] == "failure" and failed["data"]["error"] == "Cancelled"
    await send(alice, {"cancel": True, "event_id": hanging})  # frees the slot
    assert (await ask(alice, {"text": "after"}))["data"]["text"] == "echo:after"
    texts = ["".join(p.get("text", "") for p in c["params"]["message"]["parts"])
             for c in remote.calls if c["method"] == "SendStreamingMessage"]  # fmt: skip
    assert texts == ["hang", "after"]
    assert not [m for m in alice.backlog if (m.get("data") or {}).get("in_reply_to") == quiet]
    await alice.close()


@pytest.mark.parametrize("how", ["leaves", "disconnects"])
async def test_a_sender_gone_mid_stream_cancels_the_remote_task(hub, remotes, how):
    """Contract §19: the sender leaves the space or disconnects while its
    reply streams (``receivers_left``): ``CancelTask``, the stream dropped."""
    remote = await remotes()
    outbound = bridge(remote.url, timeout=20)
    server = await hosting(hub, outbound)
    alice = await member(server)
    request = await send(alice, {"text": "hang"})
    assert (await first_frame(alice, request))["type"] == "space.event.delta"
    if how == "leaves":
        await alice.request({"type": "space.leave", "space": SPACE})
    else:
        await alice.close()
    await cancel_task_sent(remote)
    await asyncio.sleep(0.2)
    assert not outbound._calls._calls  # the call is over
    if how == "leaves":
        await alice.close()


async def test_a_sender_that_stops_waiting_is_answered_nothing(hub, remotes):
    """``{cancel: true, in_reply_to}``: the call stops, the reply stream ends,
    and no failure event answers the request (docs/adapters.md)."""
    remote = await remotes()
    outbound = bridge(remote.url, timeout=20)
    server = await hosting(hub, outbound)
    alice = await member(server)
    request = await send(alice, {"text": "hang"})
    first = await first_frame(alice, request)
    await send(alice, {"cancel": True, "in_reply_to": request})
    await cancel_task_sent(remote)
    cut = await alice._until(lambda m: m.get("event_id") == first["event_id"]
                             and m["type"] == "space.event.cancel", 15)  # fmt: skip
    assert not cut["reason"].startswith("failed")
    assert (await ask(alice, {"text": "after"}))["data"]["text"] == "echo:after"
    answers = [m for m in alice.backlog if m.get("type") == "space.event"
               and (m.get("data") or {}).get("in_reply_to") == request]  # fmt: skip
    assert answers == []
    await alice.close()


# ── waiting tasks and their names are each sender's own ─────────────────────


def sent_task_ids(remote: RemoteA2a, text: str) -> list[str | None]:
    """The ``taskId`` of each message ``text`` the remote was sent."""
    messages = [c["params"]["message"] for c in remote.calls if c["method"].startswith("Send")]
    return [m.get("taskId") for m in messages if [p.get("text") for p in m["parts"]] == [text]]


async def waiting_answer(client: WsClient, request: str) -> dict[str, Any]:
    return await client._until(
        lambda m: (
            m.get("type") == "space.event" and (m.get("data") or {}).get("in_reply_to") == request
        ),
        15,
    )


async def test_no_sender_makes_the_bridge_forget_anothers_waiting_task(hub, remotes):
    """Contract §18: naming another sender's waiting task — in a cancel of
    one's own call, or as one's own name for a new task — never forgets it."""
    remote = await remotes()
    outbound = bridge(remote.url, timeout=20)
    server = await hosting(hub, outbound)
    alice, mallory = await member(server), await member(server, "mallory")
    # (a) a cancel of mallory's own call that also names alice's waiting task
    asked = await ask(alice, {"text": "ask"})
    waiting = asked["data"]["task_id"]
    own = await send(mallory, {"text": "hang"})
    await first_frame(mallory, own)
    cancel = await send(mallory, {"cancel": True, "event_id": own, "task_id": waiting})
    assert (await answer_to(mallory, cancel))["data"]["state"] == "canceled"
    assert (await ask(alice, {"text": "Oslo", "task_id": waiting}))["data"]["status"] == "success"
    assert sent_task_ids(remote, "Oslo") == [waiting]
    # (b) mallory's request naming alice's task (not waiting yet) as its own name
    request = await send(alice, {"text": "held:ask"})
    running = (await first_frame(alice, request))["data"]["task_id"]
    squat = await send(mallory, {"text": "hang", "task_id": running})
    await first_frame(mallory, squat)
    remote.gate.set()
    assert (await waiting_answer(alice, request))["data"]["state"] == "input-required"
    cancel = await send(mallory, {"cancel": True, "event_id": squat})
    assert (await answer_to(mallory, cancel))["data"]["state"] == "canceled"
    await waiting_answer(mallory, squat)  # "Cancelled": its call has settled
    assert (await ask(alice, {"text": "Rome", "task_id": running}))["data"]["status"] == "success"
    assert sent_task_ids(remote, "Rome") == [running]
    await alice.close()
    await mallory.close()


async def test_a_senders_own_task_names_are_its_own(hub, remotes):
    """Two senders may give a task the same name (``data.task_id``): each
    continues its own."""
    remote = await remotes()
    outbound = bridge(remote.url)
    server = await hosting(hub, outbound)
    alice, mallory = await member(server), await member(server, "mallory")
    hers = await ask(mallory, {"text": "ask", "task_id": "booking-1"})
    assert hers["data"]["state"] == "input-required"
    mine = await ask(alice, {"text": "ask", "task_id": "booking-1"})
    assert mine["data"]["state"] == "input-required", mine["data"]
    continued = await ask(alice, {"text": "Oslo", "task_id": "booking-1"})
    assert continued["data"]["status"] == "success"
    assert sent_task_ids(remote, "Oslo") == [mine["data"]["task_id"]]
    continued = await ask(mallory, {"text": "Rome", "task_id": "booking-1"})
    assert continued["data"]["status"] == "success"
    assert sent_task_ids(remote, "Rome") == [hers["data"]["task_id"]]
    await alice.close()
    await mallory.close()


async def test_a_running_call_is_cancelled_by_the_senders_name_for_it(hub, remotes):
    remote = await remotes()
    outbound = bridge(remote.url, timeout=20)
    server = await hosting(hub, outbound)
    alice = await member(server)
    request = await send(alice, {"text": "hang", "task_id": "job-7"})
    first = await first_frame(alice, request)
    done = await ask(alice, {"cancel": True, "task_id": "job-7"})
    assert done["data"]["status"] == "success" and done["data"]["state"] == "canceled", done
    assert done["data"]["task_id"] == first["data"]["task_id"]
    await cancel_task_sent(remote)
    assert (await waiting_answer(alice, request))["data"]["error"] == "Cancelled"
    await alice.close()


async def test_a_cancel_in_reply_to_an_answered_request_cancels_the_waiting_task(hub, remotes):
    """What the hub's A2A gateway sends for CancelTask of a task waiting for
    input: ``{task_id, cancel, in_reply_to: <the turn answered>}`` →
    ``CancelTask`` on the remote, the task forgotten, nothing answered."""
    remote = await remotes()
    outbound = bridge(remote.url)
    server = await hosting(hub, outbound)
    alice = await member(server)
    request = await send(alice, {"text": "ask", "task_id": "gw-1"})
    remote_task = (await answer_to(alice, request))["data"]["task_id"]
    await send(alice, {"cancel": True, "task_id": "gw-1", "in_reply_to": request})
    await cancel_task_sent(remote)
    cancelled = [c for c in remote.calls if c["method"] == "CancelTask"]
    assert [c["params"]["id"] for c in cancelled] == [remote_task]
    assert (await ask(alice, {"text": "Oslo", "task_id": "gw-1"}))["data"]["text"] == "echo:Oslo"
    assert sent_task_ids(remote, "Oslo") == [None]  # a new task: the old one is forgotten
    answers = [m for m in alice.backlog if (m.get("data") or {}).get("in_reply_to") == request]
    assert answers == []  # nothing beyond the input-required answer
    await alice.close()


@pytest.mark.parametrize("how", ["in_reply_to", "receiver", "leaves"])
async def test_a_remote_slow_to_cancel_holds_up_nothing(hub, remotes, how):
    """``CancelTask`` for a sender that stopped waiting goes in the background:
    a remote that never answers it does not stall the bridge's other messages."""
    remote = await remotes(hang_cancel=True)
    outbound = bridge(remote.url, timeout=10)
    server = await hosting(hub, outbound)
    alice, bob = await member(server), await member(server, "bob")
    request = await send(alice, {"text": "hang"})
    first = await first_frame(alice, request)
    if how == "in_reply_to":
        await send(alice, {"cancel": True, "in_reply_to": request})
    elif how == "receiver":
        await alice.request(
            {"type": "space.event.cancel", "space": SPACE, "event_id": first["event_id"]}
        )
    else:
        await alice.request({"type": "space.leave", "space": SPACE})
    await cancel_task_sent(remote)
    answer = await answer_to(bob, await send(bob, {"text": "next"}), timeout=3)
    assert answer["data"]["text"] == "echo:next"
    await alice.close()
    await bob.close()
