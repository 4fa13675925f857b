"""Content blocks an agent tool may answer with, checked before they reach a client.

An agent answers a tool call with ``data.content``: a list of MCP content
blocks in MCP's own shape — ``text``, ``image`` and ``audio`` (base64
``data`` with a ``mimeType``), ``resource`` (an embedded resource: ``uri``
and ``text`` or base64 ``blob``) and ``resource_link``. The hub hands them to
the MCP client as the tool result's ``content``; :func:`content_blocks`
checks every block first and keeps only the fields MCP defines, so what an
agent sends can never make a client choke — a block that does not fit is a
:class:`ContentError` whose message names it (answered as a tool error).
"""

from __future__ import annotations

import binascii
from base64 import b64decode
from typing import Any

#: Most blocks in one result.
MAX_BLOCKS = 100
MAX_MIME = 255
MAX_URI = 2048
MAX_NAME = 1024


class ContentError(ValueError):
    """``data.content`` is not a list of valid MCP content blocks."""


def content_blocks(value: Any) -> list[dict[str, Any]]:
    """``value`` (an agent's ``data.content``) as MCP content blocks."""
    if not isinstance(value, list) or not value:
        raise ContentError("content must be a non-empty list of content blocks")
    if len(value) > MAX_BLOCKS:
        raise ContentError(f"content has more than {MAX_BLOCKS} blocks")
    return [_block(i, block) for i, block in enumerate(value)]


def _block(index: int, block: Any) -> dict[str, Any]:
    where = f"content[{index}]"
    if not isinstance(block, dict):
        raise ContentError(f"{where} is not an object")
    kind = block.get("type")
    match kind:
        case "text":
            out: dict[str, Any] = {"type": "text", "text": _string(block, "text", where)}
        case "image" | "audio":
            mime = _mime(block, where)
            if not mime.startswith(f"{kind}/"):
                raise ContentError(f"{where}: an {kind} needs a mimeType {kind}/…, not {mime!r}")
            out = {"type": kind, "data": _base64(block, "data", where), "mimeType": mime}
        case "resource":
            out = {"type": "resource", "resource": _embedded(block.get("resource"), where)}
        case "resource_link":
            out = {"type": "resource_link", "uri": _uri(block, where),
                   "name": _string(block, "name", where, MAX_NAME)}  # fmt: skip
            for key in ("title", "description"):
                if key in block:
                    out[key] = _string(block, key, where)
            if "mimeType" in block:
                out["mimeType"] = _mime(block, where)
        case _:
            shown = str(kind)[:40] if isinstance(kind, str) else type(kind).__name__
            raise ContentError(
                f"{where}: unknown type {shown!r} (text, image, audio, resource, resource_link)"
            )
    for key in ("annotations", "_meta"):
        if key in block:
            if not isinstance(block[key], dict):
                raise ContentError(f"{where}.{key} must be an object")
            out[key] = block[key]
    return out


def _embedded(resource: Any, where: str) -> dict[str, Any]:
    where = f"{where}.resource"
    if not isinstance(resource, dict):
        raise ContentError(f"{where} must be an object with uri and text or blob")
    out: dict[str, Any] = {"uri": _uri(resource, where)}
    if "mimeType" in resource:
        out["mimeType"] = _mime(resource, where)
    has_text, has_blob = "text" in resource, "blob" in resource
    if has_text == has_blob:
        raise ContentError(f"{where} needs exactly one of text and blob")
    if has_text:
        out["text"] = _string(resource, "text", where)
    else:
        out["blob"] = _base64(resource, "blob", where)
    if "_meta" in resource and isinstance(resource["_meta"], dict):
        out["_meta"] = resource["_meta"]
    return out


def _string(block: dict[str, Any], key: str, where: str, limit: int | None = None) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise ContentError(f"{where}.{key} must be a string")
    if limit is not None and len(value) > limit:
        raise ContentError(f"{where}.{key} is longer than {limit} characters")
    return value


def _mime(block: dict[str, Any], where: str) -> str:
    mime = _string(block, "mimeType", where, MAX_MIME)
    kind, slash, sub = mime.partition("/")
    if not (slash and kind and sub) or not mime.isascii() or any(c.isspace() for c in mime):
        raise ContentError(f"{where}.mimeType is not a media type (type/subtype)")
    return mime


def _uri(block: dict[str, Any], where: str) -> str:
    uri = _string(block, "uri", where, MAX_URI)
    if ":" not in uri:
        raise ContentError(f"{where}.uri is not a URI")
    return uri


def _base64(block: dict[str, Any], key: str, where: str) -> str:
    value = _string(block, key, where)
    try:
        b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ContentError(f"{where}.{key} is not base64") from None
    return value
