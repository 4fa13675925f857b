"""The agent behind the MCP conformance run: the suite's test tools, as an agent offers them.

A Python SDK program (``agora_client``): it registers the tools the official
suite calls (``test_simple_text``, ``test_image_content``…) in
``metadata.mcp_tools``, joins the ``mcp = true`` space ``conformance`` and
answers each call with ``client.serve`` — content blocks in MCP's own shape
(``data.content``), a failure for ``test_error_handling``, a streamed reply
(three deltas, so three ``notifications/progress``) for
``test_tool_with_progress``. The hub lists them as ``conformance.{name}``.

It also joins the space ``123``, which the suite's resource-template read
(``test://template/123/data``) reaches as ``agora://spaces/123``.

Run: ``python -m tests.conformance.agent ws://127.0.0.1:8765/ws``; it prints
``ready`` once it serves.
"""

from __future__ import annotations

import asyncio
import base64
import struct
import sys
import zlib
from collections.abc import AsyncIterator
from typing import Any

from agora_client import Client

AGENT = "conformance"
SPACE = "conformance"
TEMPLATE_SPACE = "123"


def _png() -> str:
    """A 1x1 red PNG."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)
    return base64.b64encode(png + chunk(b"IEND", b"")).decode()


def _wav() -> str:
    """A tenth of a second of silence, 8 kHz mono 8-bit."""
    samples = b"\x80" * 800
    header = b"RIFF" + struct.pack("<I", 36 + len(samples)) + b"WAVEfmt "
    header += struct.pack("<IHHIIHH", 16, 1, 1, 8000, 8000, 1, 8)
    return base64.b64encode(header + b"data" + struct.pack("<I", len(samples)) + samples).decode()


PNG = _png()
WAV = _wav()
NO_ARGUMENTS = {"type": "object", "properties": {}}
JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}

TOOLS = [
    {"name": "test_simple_text", "description": "Simple text", "inputSchema": NO_ARGUMENTS},
    {"name": "test_image_content", "description": "An image", "inputSchema": NO_ARGUMENTS},
    {"name": "test_audio_content", "description": "Audio", "inputSchema": NO_ARGUMENTS},
    {"name": "test_embedded_resource", "description": "A resource", "inputSchema": NO_ARGUMENTS},
    {"name": "test_multiple_content_types", "description": "Mixed", "inputSchema": NO_ARGUMENTS},
    {"name": "test_error_handling", "description": "Always fails", "inputSchema": NO_ARGUMENTS},
    {"name": "test_tool_with_progress", "description": "Streams", "inputSchema": NO_ARGUMENTS},
    {
        "name": "json_schema_2020_12_tool",
        "description": "Tool with JSON Schema 2020-12 features",
        "inputSchema": JSON_SCHEMA_2020_12,
    },
]


def content(tool: str) -> list[dict[str, Any]]:
    match tool:
        case "test_simple_text":
            return [{"type": "text", "text": "This is a simple text response for testing."}]
        case "test_image_content":
            return [{"type": "image", "data": PNG, "mimeType": "image/png"}]
        case "test_audio_content":
            return [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]
        case "test_embedded_resource":
            return [{"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content.",
            }}]  # fmt: skip
        case "test_multiple_content_types":
            return [
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": PNG, "mimeType": "image/png"},
                {"type": "resource", "resource": {
                    "uri": "test://mixed-content-resource", "mimeType": "application/json",
                    "text": '{"test":"data","value":123}',
                }},
            ]  # fmt: skip
        case "json_schema_2020_12_tool":
            return [{"type": "text", "text": "ok"}]
    raise ValueError(f"unknown tool {tool!r}")


async def progress() -> AsyncIterator[str]:
    """Three deltas, each sent before the next is produced."""
    for step in ("0/100 ", "50/100 ", "100/100"):
        yield step
        await asyncio.sleep(0.1)  # apart by more than the SDK coalesces (20 ms)


def handle(event: Any) -> Any:
    data = event.data
    if data.get("via") != "mcp":
        return None
    tool = data.get("tool")
    if tool == "test_error_handling":
        raise RuntimeError("This tool intentionally returns an error for testing")
    if tool == "test_tool_with_progress":
        return progress()
    return {"content": content(str(tool))}


async def main(url: str) -> None:
    async with Client(url, AGENT, reconnect=True, metadata={"mcp_tools": TOOLS}) as client:
        await client.join(SPACE)
        await client.join(TEMPLATE_SPACE)
        print("ready", flush=True)
        await client.serve(SPACE, handle, addressed_only=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
