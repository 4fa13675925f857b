"""Agent tools answer MCP content blocks (``data.content``): checked, never passed on broken."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from protocol.mcp.content import MAX_BLOCKS, ContentError, content_blocks
from protocol.mcp.results import reply_result

PNG = "iVBORw0KGgo="
IMAGE = {"type": "image", "data": PNG, "mimeType": "image/png"}
AUDIO = {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}
EMBEDDED = {"type": "resource",
            "resource": {"uri": "test://x", "mimeType": "text/plain", "text": "hi"}}  # fmt: skip
BLOB = {"type": "resource", "resource": {"uri": "file:///a.bin", "blob": "AAEC"}}
LINK = {"type": "resource_link", "uri": "agora://spaces/lab", "name": "lab", "title": "Lab"}


def test_every_kind_of_block_is_passed_on_with_mcp_fields_only():
    blocks = [{"type": "text", "text": "hello", "extra": 1}, IMAGE, AUDIO, EMBEDDED, BLOB, LINK,
              {**IMAGE, "annotations": {"audience": ["user"]}}]  # fmt: skip
    out = content_blocks(blocks)
    assert out[0] == {"type": "text", "text": "hello"}
    assert out[1:6] == [IMAGE, AUDIO, EMBEDDED, BLOB, LINK]
    assert out[6]["annotations"] == {"audience": ["user"]}
    orjson.dumps(out)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("text", "non-empty list"),
        ([], "non-empty list"),
        ([{"type": "text", "text": "x"}] * (MAX_BLOCKS + 1), f"more than {MAX_BLOCKS}"),
        ([7], "content[0] is not an object"),
        ([{"type": "video", "data": PNG}], "unknown type 'video'"),
        ([{"text": "x"}], "unknown type"),
        ([{"type": "text", "text": 3}], "content[0].text must be a string"),
        ([{"type": "image", "data": "not base64!", "mimeType": "image/png"}], "not base64"),
        ([{"type": "image", "data": "ünï", "mimeType": "image/png"}], "not base64"),
        ([{"type": "image", "data": PNG}], "mimeType must be a string"),
        ([{"type": "image", "data": PNG, "mimeType": "audio/wav"}], "image/"),
        ([{"type": "audio", "data": PNG, "mimeType": "wav"}], "not a media type"),
        ([{"type": "resource"}], "content[0].resource must be an object"),
        ([{"type": "resource", "resource": {"uri": "x:y"}}], "exactly one of text and blob"),
        (
            [{"type": "resource", "resource": {"uri": "x:y", "text": "a", "blob": "AA=="}}],
            "exactly one",
        ),
        ([{"type": "resource", "resource": {"uri": "nouri", "text": "a"}}], "not a URI"),
        ([{"type": "resource_link", "uri": "a:b"}], "name must be a string"),
        ([{**IMAGE, "annotations": []}], "annotations must be an object"),
    ],
)
def test_a_block_that_does_not_fit_is_named(content: Any, says: str):
    with pytest.raises(ContentError) as caught:
        content_blocks(content)
    assert says in str(caught.value)


def test_a_reply_with_content_becomes_the_result():
    result = reply_result({"in_reply_to": "e1", "content": [IMAGE], "result": {"n": 1}})
    assert result == {"content": [IMAGE], "isError": False, "structuredContent": {"n": 1}}
    failed = reply_result({"status": "failure", "error": "no", "content": [IMAGE]})
    assert failed["isError"] is True and failed["content"][0]["text"] == "no"


def test_a_reply_with_bad_content_is_a_clear_tool_error():
    result = reply_result({"content": [{"type": "image", "data": "!!", "mimeType": "image/png"}]})
    assert result["isError"] is True
    assert result["content"] == [{"type": "text", "text": (
        "The agent's reply has invalid content: content[0].data is not base64")}]  # fmt: skip
