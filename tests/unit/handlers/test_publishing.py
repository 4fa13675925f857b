"""Publishing: events, acknowledgements, addressed and streamed publishes,
idempotency keys, client streams and signed envelopes — against the memory
backplane, members being fakes that record what reaches them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub.handlers.publishing import split_utf8
from tests.support.envelopes import agora_request, ap_request, bad_signature, forged
from tests.support.handlers import HandlerRig, until
from tests.support.peers import FakePeer

Room = tuple[HandlerRig, FakePeer, FakePeer, FakePeer]


async def room_of(rig: HandlerRig, space: str = "room") -> Room:
    """alice, bob and carol in ``space``, nothing received yet."""
    peers = [await rig.connect(a) for a in ("alice", "bob", "carol")]
    for p in peers:
        await rig.join(p, space)
    for p in peers:
        p.frames.clear()
    return rig, *peers  # type: ignore[return-value]


@pytest.fixture
async def room(rig: HandlerRig) -> Room:
    return await room_of(rig)


async def last_seq(rig: HandlerRig, space: str = "room") -> int:
    return (await rig.backplane.position(space)).seq


# ── events and acknowledgements ──────────────────────────────────────────────


async def test_an_event_reaches_every_member_and_the_echo_is_the_acknowledgement(
    room: Room,
) -> None:
    rig, alice, bob, carol = room
    await rig.publish(alice, "room", {"text": "hi"}, id="p1")
    event = bob.one()
    assert event["type"] == "space.event" and event["space"] == "room"
    assert event["from"] == "alice" and event["seq"] == 1
    assert event["data"] == {"text": "hi", "from": "alice"}, "data.from filled in"
    assert isinstance(event["timestamp"], int) and event["event_id"].startswith("evt-")
    assert alice.one() == event == carol.one(), "one encoding for everyone, echo included"
    assert event["request_id"] == "p1"
    assert alice.messages("space.published") == []
    assert rig.counters.published == 1


async def test_echo_false_is_acknowledged_by_space_published(room: Room) -> None:
    rig, alice, bob, _ = room
    await rig.publish(alice, "room", {"text": "quiet"}, id="p1", echo=False)
    event = bob.one()
    ack = alice.one()
    assert ack["type"] == "space.published" and ack["id"] == "p1"
    assert (ack["event_id"], ack["seq"], ack["timestamp"]) == (
        event["event_id"],
        event["seq"],
        event["timestamp"],
    )
    assert "duplicate" not in ack


async def test_a_data_from_naming_the_sender_is_kept_and_another_is_refused(room: Room) -> None:
    rig, alice, bob, _ = room
    await rig.publish(alice, "room", {"text": "x", "from": "alice"}, id="p1")
    assert bob.one()["data"] == {"text": "x", "from": "alice"}
    await rig.publish(alice, "room", {"text": "x", "from": "bob"}, id="p2")
    assert alice.errors() == [("INVALID_REQUEST", "p2")]
    assert len(bob.messages()) == 1 and await last_seq(rig) == 1


async def test_publishing_outside_ones_spaces_is_refused_by_kind(room: Room) -> None:
    rig, alice, _, _ = room
    outsider = await rig.connect("dave")
    await rig.publish(outsider, "room", {"text": "x"}, id="p1")  # exists: not a member
    await rig.publish(outsider, "nowhere", {"text": "x"}, id="p2")  # does not exist
    assert outsider.errors() == [("UNAUTHORIZED", "p1"), ("SPACE_NOT_FOUND", "p2")]
    assert alice.frames == [] and await last_seq(rig) == 0


async def test_an_unreachable_backplane_is_unavailable_and_nothing_is_delivered(
    room: Room,
) -> None:
    rig, alice, bob, _ = room
    rig.backplane.switches.fail.add("publish")
    await rig.publish(alice, "room", {"text": "x"}, id="p1")
    await rig.publish(alice, "room", {"text": "y"}, id="p2", echo=False)
    await rig.publish(alice, "room", {"text": "z"}, id="p3", idempotency_key="k")
    assert alice.errors() == [("UNAVAILABLE", "p1"), ("UNAVAILABLE", "p2"), ("UNAVAILABLE", "p3")]
    assert bob.frames == []
    assert rig.counters.backplane_errors == 3
    # agora_hub_published_total counts what was published (an outside audit:
    # refused publishes were counted).
    assert rig.counters.published == 0
    rig.backplane.switches.fail.clear()
    await rig.publish(alice, "room", {"text": "x"}, id="p4")
    assert len(bob.messages()) == 1 and rig.counters.published == 1


# ── addressed publish ────────────────────────────────────────────────────────


async def test_an_addressed_event_reaches_its_recipients_and_the_senders_echo(room: Room) -> None:
    rig, alice, bob, carol = room
    await rig.publish(alice, "room", {"text": "psst"}, id="p1", to="bob")
    event = bob.one()
    assert event["to"] == "bob", "to as sent"
    assert alice.one() == event
    assert carol.frames == []
    await rig.publish(alice, "room", {"text": "both"}, to=["bob", "carol", "bob"])
    assert carol.one()["to"] == ["bob", "carol", "bob"]
    assert len(bob.messages()) == 2


async def test_addressed_without_echo_skips_the_sender(room: Room) -> None:
    rig, alice, bob, carol = room
    await rig.publish(alice, "room", {"text": "psst"}, id="p1", to="bob", echo=False)
    assert bob.one()["type"] == "space.event"
    assert alice.one()["type"] == "space.published"
    assert carol.frames == []


async def test_addressing_a_non_member_is_refused_and_nothing_published(room: Room) -> None:
    rig, alice, bob, _ = room
    await rig.connect("dave")  # connected, not in the space
    await rig.publish(alice, "room", {"text": "x"}, id="p1", to=["bob", "dave", "zed"])
    error = alice.one()
    assert (error["code"], error["request_id"]) == ("INVALID_REQUEST", "p1")
    assert "'dave'" in error["message"] and "'zed'" in error["message"]
    assert "'bob'" not in error["message"]
    assert bob.frames == [] and await last_seq(rig) == 0


# ── big text: deltas and a done ──────────────────────────────────────────────


async def test_big_text_goes_out_as_deltas_then_done(make_rig: Any) -> None:
    rig, alice, bob, _ = await room_of(await make_rig(stream_threshold=64, stream_chunk=16))
    text = "héllo wörld, " * 10  # 130 chars, more bytes: never split inside é/ö
    await rig.publish(alice, "room", {"text": text, "lang": "en"}, id="p1")
    got = bob.messages()
    *deltas, done = got
    assert [m["type"] for m in deltas] == ["space.event.delta"] * len(deltas)
    assert len(deltas) >= len(text.encode()) // 16
    assert all(len(m["data"]["text"].encode()) <= 16 for m in deltas)
    assert "".join(m["data"]["text"] for m in deltas) == text
    assert deltas[0]["data"] == {"text": deltas[0]["data"]["text"], "lang": "en", "from": "alice"}
    assert all(set(m["data"]) == {"text"} for m in deltas[1:]), "other fields ride on the first"
    assert done["type"] == "space.event.done" and done["request_id"] == "p1"
    stream = {m["event_id"] for m in got}
    assert len(stream) == 1 and stream.pop().startswith("alice/")
    assert [m["seq"] for m in got] == list(range(1, len(got) + 1))
    assert alice.messages() == got, "the echo is the acknowledgement"
    assert rig.counters.published == 1


async def test_big_text_without_echo_or_addressed(make_rig: Any) -> None:
    rig, alice, bob, carol = await room_of(await make_rig(stream_threshold=64, stream_chunk=16))
    await rig.publish(alice, "room", {"text": "x" * 100}, id="p1", echo=False)
    ack = alice.one()
    assert ack["type"] == "space.published" and ack["event_id"] == bob.messages()[0]["event_id"]
    assert ack["seq"] == bob.messages()[-1]["seq"], "the done's seq"
    alice.frames.clear()
    bob.frames.clear()
    carol.frames.clear()
    await rig.publish(alice, "room", {"text": "y" * 100}, to="bob")
    assert bob.messages()[0]["to"] == "bob"
    assert bob.messages()[-1]["type"] == "space.event.done"
    assert alice.messages() == bob.messages()
    assert carol.frames == []


async def test_text_at_the_threshold_is_one_event(make_rig: Any) -> None:
    rig, alice, bob, _ = await room_of(await make_rig(stream_threshold=64))
    await rig.publish(alice, "room", {"text": "x" * 64})
    assert bob.one()["type"] == "space.event"
    await rig.publish(alice, "room", {"text": "x" * 65})
    assert bob.messages()[-1]["type"] == "space.event.done"


@given(st.text(), st.integers(min_value=4, max_value=64))
def test_split_utf8_reassembles_exactly(text: str, size: int) -> None:
    pieces = split_utf8(text, size)
    assert "".join(pieces) == text
    assert all(0 < len(p.encode()) <= size for p in pieces)


def test_split_utf8_never_cuts_a_character() -> None:
    text = "a" + "€" * 10 + "😀" * 5  # 1, 3 and 4 byte characters
    for size in range(4, 12):
        for piece in split_utf8(text, size):
            piece.encode()  # a cut character could not be encoded back
        assert "".join(split_utf8(text, size)) == text
    with pytest.raises(ValueError):
        split_utf8(text, 3)


# ── idempotency keys ─────────────────────────────────────────────────────────


async def test_a_retry_is_answered_with_the_original_ids_and_not_published_again(
    room: Room,
) -> None:
    rig, alice, bob, _ = room
    await rig.publish(alice, "room", {"text": "once"}, id="p1", idempotency_key="k1")
    original = bob.one()
    alice.frames.clear()
    await rig.publish(alice, "room", {"text": "once"}, id="p2", idempotency_key="k1")
    ack = alice.one()
    assert ack["type"] == "space.published" and ack["id"] == "p2" and ack["duplicate"] is True
    assert (ack["event_id"], ack["seq"], ack["timestamp"]) == (
        original["event_id"],
        original["seq"],
        original["timestamp"],
    )
    assert bob.messages() == [original], "not delivered again"
    assert await last_seq(rig) == 1 and rig.counters.published == 1


async def test_a_reused_key_with_other_data_or_recipients_is_refused(room: Room) -> None:
    rig, alice, bob, _ = room
    await rig.publish(alice, "room", {"text": "a"}, idempotency_key="k1")
    original = bob.one()
    alice.frames.clear()
    await rig.publish(alice, "room", {"text": "b"}, id="p2", idempotency_key="k1")
    await rig.publish(alice, "room", {"text": "a"}, id="p3", idempotency_key="k1", to="bob")
    assert alice.errors() == [("INVALID_REQUEST", "p2"), ("INVALID_REQUEST", "p3")]
    assert original["event_id"] in alice.messages()[0]["message"]
    assert bob.messages() == [original] and await last_seq(rig) == 1


async def test_keys_are_the_senders_own(room: Room) -> None:
    rig, alice, bob, carol = room
    await rig.publish(alice, "room", {"text": "a"}, idempotency_key="k1")
    await rig.publish(bob, "room", {"text": "a"}, idempotency_key="k1")
    assert [m["from"] for m in carol.messages()] == ["alice", "bob"]


async def test_a_streamed_publish_is_retried_without_a_second_stream(make_rig: Any) -> None:
    rig, alice, bob, _ = await room_of(await make_rig(stream_threshold=64, stream_chunk=32))
    await rig.publish(alice, "room", {"text": "z" * 100}, id="p1", idempotency_key="big")
    first = bob.messages()
    alice.frames.clear()
    await rig.publish(alice, "room", {"text": "z" * 100}, id="p2", idempotency_key="big")
    ack = alice.one()
    assert ack["duplicate"] is True and ack["event_id"] == first[0]["event_id"]
    done = first[-1]
    assert done["type"] == "space.event.done"
    # The original's acknowledgement is its done: a retry gets the same seq.
    assert (ack["seq"], ack["timestamp"]) == (done["seq"], first[0]["timestamp"])
    assert bob.messages() == first


async def test_a_resent_signed_envelope_is_refused_as_replayed_whatever_its_key(
    room: Room,
) -> None:
    """The documented exception (docs/delivery.md): an envelope's own replay
    protection answers a retry, before any idempotency key is looked at."""
    rig, alice, bob, _ = room
    envelope = agora_request()
    await rig.publish(alice, "room", envelope, id="p1", idempotency_key="k", echo=False)
    await rig.publish(alice, "room", envelope, id="p2", idempotency_key="k", echo=False)
    assert alice.messages()[0]["type"] == "space.published"
    error = alice.messages()[1]
    assert (error["code"], error["request_id"]) == ("UNAUTHORIZED", "p2")
    assert "replayed" in error["message"]
    assert len(bob.messages()) == 1 and await last_seq(rig) == 1


# ── client streams ───────────────────────────────────────────────────────────


def delta(event_id: str, text: str, **extra: Any) -> dict[str, Any]:
    data = {"text": text, **extra.pop("data", {})}
    return {
        "type": "space.event.delta",
        "space": "room",
        "event_id": event_id,
        "data": data,
        **extra,
    }


async def test_a_client_stream_is_relayed_delta_by_delta_then_done(room: Room) -> None:
    rig, alice, bob, _ = room
    await rig.send(alice, delta("s1", "Hel", data={"kind": "answer"}))
    await rig.send(alice, delta("s1", "lo"))
    await rig.send(
        alice, {"type": "space.event.done", "space": "room", "event_id": "s1", "id": "d"}
    )
    got = bob.messages()
    assert [m["type"] for m in got] == ["space.event.delta"] * 2 + ["space.event.done"]
    assert {m["event_id"] for m in got} == {"alice/s1"}, "namespaced by the hub"
    assert got[0]["data"] == {"text": "Hel", "kind": "answer", "from": "alice"}
    assert got[1]["data"] == {"text": "lo"}
    assert got[2]["request_id"] == "d"
    assert alice.messages() == got, "echo on by default"
    await rig.send(alice, delta("s1", "late", id="x"))
    assert alice.errors() == [("INVALID_REQUEST", "x")]
    assert len(bob.messages()) == 3


async def test_a_first_delta_refused_unavailable_opens_nothing_and_may_be_sent_again(
    room: Room,
) -> None:
    """UNAVAILABLE means not carried out: the stream is not open after it (its
    next frames used to be taken as a continuation of a stream nobody saw
    open — published into history, delivered to no one, unanswered), and the
    same first delta opens it once the backplane is back."""
    rig, alice, bob, _ = room
    rig.backplane.switches.fail.add("publish")
    await rig.send(alice, delta("s1", "Hel", data={"kind": "answer"}, id="d1"))
    assert alice.errors() == [("UNAVAILABLE", "d1")]
    assert alice.session is not None and alice.session.open_streams == 0
    rig.backplane.switches.fail.clear()
    await rig.send(alice, delta("s1", "Hel", data={"kind": "answer"}, id="d2"))
    await rig.send(alice, {"type": "space.event.done", "space": "room", "event_id": "s1",
                           "id": "done"})  # fmt: skip
    got = bob.messages()
    assert [m["type"] for m in got] == ["space.event.delta", "space.event.done"], got
    assert got[0]["data"] == {"text": "Hel", "kind": "answer", "from": "alice"}
    echoed = [m for m in alice.messages() if m["type"] != "error"]
    assert [(m["type"], m.get("request_id")) for m in echoed] == [
        ("space.event.delta", None), ("space.event.done", "done"),
    ]  # fmt: skip


async def test_the_publishers_cancel_reaches_every_receiver_and_ends_the_stream(
    room: Room,
) -> None:
    rig, alice, bob, carol = room
    await rig.send(alice, delta("s1", "a", echo=False))
    await rig.send(
        alice,
        {
            "type": "space.event.cancel",
            "space": "room",
            "event_id": "s1",
            "reason": "oops",
            "id": "c",
        },
    )
    for receiver in (bob, carol):
        cancel = receiver.messages()[-1]
        assert cancel["type"] == "space.event.cancel" and cancel["event_id"] == "alice/s1"
        assert cancel["reason"] == "oops"
    ack = alice.one()
    assert ack["type"] == "space.event.cancel" and ack["request_id"] == "c"
    assert ack == bob.messages()[-1]
    await rig.send(alice, delta("s1", "more", id="x"))
    assert alice.errors() == [("INVALID_REQUEST", "x")]
    assert len(bob.messages()) == 2


async def test_a_receiver_cancel_stops_that_receiver_only(room: Room) -> None:
    rig, alice, bob, carol = room
    await rig.send(alice, delta("s1", "a"))
    await rig.send(
        bob, {"type": "space.event.cancel", "space": "room", "event_id": "alice/s1", "id": "rc"}
    )
    ack = bob.messages()[-1]
    assert ack == {
        "type": "space.event.cancel",
        "space": "room",
        "event_id": "alice/s1",
        "reason": "receiver_cancelled",
        "id": "rc",
    }
    await rig.send(alice, delta("s1", "b"))
    await rig.send(alice, {"type": "space.event.done", "space": "room", "event_id": "s1"})
    assert len(bob.messages()) == 2, "nothing more for bob"
    assert [m["type"] for m in carol.messages()] == ["space.event.delta"] * 2 + ["space.event.done"]
    assert [m["type"] for m in alice.messages()][-1] == "space.event.done"


async def test_cancelling_a_stream_one_does_not_receive_is_refused(room: Room) -> None:
    rig, _, bob, _ = room
    await rig.send(
        bob, {"type": "space.event.cancel", "space": "room", "event_id": "alice/nope", "id": "rc"}
    )
    assert bob.errors() == [("INVALID_REQUEST", "rc")]


async def test_a_stream_reaches_only_who_saw_its_first_delta(room: Room) -> None:
    rig, alice, bob, _ = room
    await rig.send(alice, delta("s1", "a"))
    dave = await rig.connect("dave")
    await rig.join(dave, "room")
    dave.frames.clear()
    await rig.send(alice, delta("s1", "b"))
    await rig.send(alice, {"type": "space.event.done", "space": "room", "event_id": "s1"})
    assert dave.frames == [], "joined mid-stream: none of it"
    assert len(bob.messages("space.event.delta")) == 2


# ── signed envelopes ─────────────────────────────────────────────────────────


@pytest.mark.parametrize("make", [agora_request, ap_request], ids=["agora", "agentprotocol"])
async def test_a_signed_envelope_is_delivered_verified_and_unmodified(
    room: Room, make: Any
) -> None:
    rig, alice, bob, _ = room
    envelope = make()
    await rig.publish(alice, "room", envelope, id="p1")
    event = bob.one()
    assert event["verified"] is True and event["signer"]
    assert event["data"] == envelope, "exactly as signed: no data.from"
    assert event["from"] == "alice"
    assert alice.one() == event


@pytest.mark.parametrize("spoil", [forged, bad_signature], ids=["forged", "bad-signature"])
async def test_a_bad_signature_is_refused_with_nothing_delivered(room: Room, spoil: Any) -> None:
    rig, alice, bob, _ = room
    await rig.publish(alice, "room", spoil(agora_request()), id="p1")
    error = alice.one()
    assert (error["code"], error["request_id"]) == ("UNAUTHORIZED", "p1")
    assert error["message"].startswith("envelope refused, ")
    assert bob.frames == [] and await last_seq(rig) == 0


async def test_a_replayed_envelope_is_refused(room: Room) -> None:
    rig, alice, bob, _ = room
    envelope = agora_request()
    await rig.publish(alice, "room", envelope, id="p1")
    await rig.publish(bob, "room", envelope, id="p2")
    assert bob.errors() == [("UNAUTHORIZED", "p2")]
    assert len(alice.messages("space.event")) == 1 and await last_seq(rig) == 1


async def test_an_envelope_the_backplane_refused_may_be_sent_again(room: Room) -> None:
    rig, alice, bob, _ = room
    envelope = agora_request()
    rig.backplane.switches.fail.add("publish")
    await rig.publish(alice, "room", envelope, id="p1")
    assert alice.errors() == [("UNAVAILABLE", "p1")]
    await until(lambda: len(rig.kv) == 0)  # its id is forgotten again
    rig.backplane.switches.fail.clear()
    await rig.publish(alice, "room", envelope, id="p2")
    assert bob.one()["verified"] is True


async def test_an_unsigned_envelope_is_delivered_unverified(room: Room) -> None:
    rig, alice, bob, _ = room
    envelope = agora_request()
    del envelope["sender"]["signature"]
    await rig.publish(alice, "room", envelope)
    event = bob.one()
    assert event["verified"] is False and "signer" not in event


async def test_a_require_signed_space_takes_only_valid_envelopes(make_rig: Any) -> None:
    rig = await make_rig(spaces=[{"id": "vault", "require_signed": True}])
    rig, alice, bob, _ = await room_of(rig, "vault")
    unsigned = agora_request()
    del unsigned["sender"]["signature"]
    await rig.publish(alice, "vault", {"text": "plain"}, id="p1")
    await rig.publish(alice, "vault", unsigned, id="p2")
    assert alice.errors() == [("UNAUTHORIZED", "p1"), ("UNAUTHORIZED", "p2")]
    await rig.publish(alice, "vault", agora_request(), id="p3")
    assert bob.one()["verified"] is True


async def test_an_addressed_envelope_to_a_non_member_records_nothing(room: Room) -> None:
    rig, alice, bob, _ = room
    envelope = agora_request()
    await rig.publish(alice, "room", envelope, id="p1", to="zed")
    assert alice.errors() == [("INVALID_REQUEST", "p1")]
    await rig.publish(alice, "room", envelope, id="p2", to="bob")
    assert bob.one()["verified"] is True, "the refused attempt did not burn its id"


async def test_a_full_seen_id_cache_refuses_envelopes_rather_than_let_them_through(
    make_rig: Any,
) -> None:
    rig, alice, bob, _ = await room_of(await make_rig(kv_max_entries=1))
    await rig.publish(alice, "room", agora_request(), id="p1")
    await rig.publish(alice, "room", agora_request(), id="p2")  # cannot tell if replayed
    assert alice.errors() == [("UNAVAILABLE", "p2")]
    assert len(bob.messages()) == 1 and await last_seq(rig) == 1
    await rig.publish(alice, "room", {"text": "plain"}, id="p3")
    assert bob.messages()[-1]["data"]["text"] == "plain", "other publishes are not affected"
