import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import codec
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import SpacePublish, hub_message_adapter


def test_decodes_a_valid_message():
    msg = codec.decode('{"type":"space.publish","id":"m1","space":"general","data":{"text":"hi"}}')
    assert isinstance(msg, SpacePublish)
    assert (msg.id, msg.space, msg.data, msg.echo) == ("m1", "general", {"text": "hi"}, True)


PUBLISH = '{"type":"space.publish","id":"p","space":"a","data":{"n":%s}}'


@pytest.mark.parametrize(
    ("frame", "fragment", "rid"),
    [
        (b'{"type":"agent.heartbeat"}', "binary frames", None),
        ("not json", "invalid JSON", None),
        ("[1,2]", "JSON object", None),
        ('"text"', "JSON object", None),
        ('{"id":"x"}', "missing string field 'type'", "x"),
        ('{"type":5,"id":"x"}', "missing string field 'type'", "x"),
        ('{"type":"space.explode","id":"q"}', "unknown message type", "q"),
        ('{"type":"space.join","id":"j"}', "space: Field required", "j"),
        ('{"type":"space.join","id":"j","space":7}', "space: Input should be a valid string", "j"),
        ('{"type":"space.publish","id":"p","space":"a","data":[1]}', "data", "p"),
        ('{"type":"space.publish","id":"p","space":"a","data":{},"echo":"no"}', "echo", "p"),
        ('{"type":"space.join","id":3,"space":"a"}', "id", 3),
        ("[" * 5000 + "]" * 5000, "invalid JSON", None),
        ('{"type":"space.join","space":"' + "\\ud800" + '"}', "invalid JSON", None),
        # Valid JSON whose numbers no double holds (orjson calls them invalid JSON).
        (PUBLISH % ("9" * 400), "integer 9999", "p"),
        (PUBLISH % ("-" + "9" * 5000), "does not fit in 64 bits", "p"),
        (PUBLISH % "1e400", "number 1e400 does not fit in a double", "p"),
        (PUBLISH % "[1, -2.5e999]", "number -2.5e999 does not fit in a double", "p"),
        (PUBLISH % ("9" * 25), "integer 9999999999999999999999999 does not fit in 64 bits", "p"),
        ('{"id":"p","n":1e400', "invalid JSON", None),  # not JSON at all
        ('{"id":"p","n":1e400,"m":NaN}', "invalid JSON", None),
        ("[" * 5000 + "1e400" + "]" * 5000, "invalid JSON", None),
    ],
)
def test_bad_frames_become_protocol_errors(frame, fragment, rid):
    with pytest.raises(ProtocolError) as info:
        codec.decode(frame)
    assert info.value.code is ErrorCode.INVALID_REQUEST
    assert fragment in info.value.message
    assert info.value.request_id == rid


@pytest.mark.parametrize(
    ("to", "message"),
    [
        (["x"] * 101, "to: List should have at most 100 items after validation, not 101"),
        (["ok", "x y"], "to.1: String should match pattern"),
        (5, "to: Input should be a valid string; to: Input should be a valid list"),
    ],
)
def test_a_union_field_says_what_is_wrong_with_what_was_given(to, message):
    """``to`` is an id or a list of them: the error names what is wrong with the
    form given, not pydantic's union member tags (``to.list[constrained-str]``)
    nor "not a string" for a list."""
    frame = orjson.dumps({"type": "space.publish", "space": "a", "data": {}, "to": to})
    with pytest.raises(ProtocolError) as info:
        codec.decode(frame.decode())
    assert info.value.message.startswith(f"invalid space.publish: {message}")
    assert "constrained" not in info.value.message and "[" not in info.value.message.split(":")[1]


@given(st.binary(max_size=200) | st.text(max_size=200))
def test_no_input_raises_anything_but_protocol_error(frame):
    try:
        codec.decode(frame)
    except ProtocolError:
        pass


def test_sequenced_frames_parse_as_hub_messages():
    head, tail = codec.sequenced(
        "space.event",
        "general",
        "evt-1",
        {"from": "alice", "timestamp": 1, "data": {"text": "x"}, "request_id": "m1"},
    )
    frame = codec.complete(head, 42, tail)
    msg = hub_message_adapter.validate_json(frame)
    assert msg.type == "space.event" and msg.seq == 42 and msg.from_ == "alice"
    assert orjson.loads(frame)["request_id"] == "m1"


@pytest.mark.parametrize(
    "frame",
    [
        codec.registered("r", "a", "ws-1", 30000, 60000),
        codec.heartbeat(),
        codec.refreshed("r", 1_900_000_000.5),
        codec.refreshed(None, None),
        codec.joined("j", "general", ["a"], 1),
        codec.left("l", "general"),
        codec.members("general", ["a", "b"], 2, "b", None),
        codec.space_list("s", [{"id": "general", "type": "public", "member_count": 1}]),
        codec.published("p", "general", "evt-1", 3, 1),
        codec.error(ErrorCode.SPACE_FULL, "full", "j"),
        codec.receiver_cancelled("c", "general", "a/e1"),
        codec.cancel_notice("general", "a/e1", "a", "idle_timeout"),
        codec.complete(
            *codec.sequenced("space.event.done", "g", "a/e", {"from": "a", "timestamp": 1})[:1],
            9,
            codec.sequenced("space.event.done", "g", "a/e", {"from": "a", "timestamp": 1})[1],
        ),
    ],
)
def test_every_builder_matches_the_models(frame):
    hub_message_adapter.validate_json(frame)


def test_members_frame_keeps_nulls_like_the_seed():
    assert orjson.loads(codec.members("g", ["a"], 1, None, "b")) == {
        "type": "space.members",
        "space": "g",
        "members": ["a"],
        "member_count": 1,
        "joined": None,
        "left": "b",
    }
