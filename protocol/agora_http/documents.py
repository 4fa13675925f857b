"""Protocol Documents and their sources.

A document (seed 001 §8.1) is YAML metadata — at least ``name``, ``description`` and
``multiround`` — then a line ``---``, then free text. Two layouts exist in the wild and
both are read: the spec's (metadata first, one ``---`` line) and the front-matter layout
the ``agora-protocol`` library writes and expects (``---``, metadata, ``---``, text).

``protocolSources`` items are the document text itself or a ``data:`` URI (percent- or
base64-encoded). Other URLs are never fetched: such a source is just text whose hash will
not match.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import yaml

from protocol.agora_http.errors import AgoraHttpError, ProtocolDocumentError, invalid_field
from protocol.agora_http.identifiers import hash_document

MAX_SOURCE_BYTES = 256 * 1024
MAX_NAME_CHARS = 256

_SEPARATOR = re.compile(r"^---[ \t]*\r?$", re.MULTILINE)
_TEXT_CHARSETS = {"utf-8", "utf8", "us-ascii", "ascii"}
# What the library emits; used for our own outbound sources too.
_DATA_URI_PREFIX = "data:text/plain;charset=utf-8,"


def encode_source(text: str) -> str:
    """A document as a percent-encoded ``data:`` URI, byte-identical to the library's."""
    return _DATA_URI_PREFIX + urllib.parse.quote(text)


def decode_source(source: object, *, max_bytes: int = MAX_SOURCE_BYTES) -> str:
    """The document text carried by one ``protocolSources`` item (HTTP 400 if invalid)."""
    if not isinstance(source, str):
        raise invalid_field("a protocol source must be a string")
    # Cheap bound before any decoding: percent-encoding at most triples the size.
    if len(source) > 3 * max_bytes + 256:
        raise _too_large(max_bytes)
    if source[:5].lower() != "data:":
        if len(source.encode("utf-8", "surrogatepass")) > max_bytes:
            raise _too_large(max_bytes)
        return source
    header, comma, payload = source[5:].partition(",")
    if not comma:
        raise invalid_field("a data: URI source has no ',' before its data")
    params = [p.strip().lower() for p in header.split(";")]
    is_base64 = params[-1] == "base64"
    if is_base64:
        params.pop()
    media_type, options = params[0], params[1:]
    if media_type and not media_type.startswith("text/"):
        raise invalid_field(f"a data: URI source must be text, not {media_type[:64]!r}")
    for option in options:
        name, _, value = option.partition("=")
        if name == "charset" and value not in _TEXT_CHARSETS:
            raise invalid_field(f"a data: URI source must be UTF-8, not {value[:64]!r}")
    data = urllib.parse.unquote_to_bytes(payload)
    if is_base64:
        try:
            data = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise invalid_field("a data: URI source has invalid base64") from None
    if len(data) > max_bytes:
        raise _too_large(max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_field("a data: URI source is not valid UTF-8") from None


def _too_large(max_bytes: int) -> AgoraHttpError:
    return invalid_field(f"a protocol source exceeds {max_bytes} bytes")


@dataclass(frozen=True, slots=True)
class ProtocolDocument:
    """A parsed Protocol Document; ``hash`` is over the exact ``text``."""

    name: str
    description: str
    multiround: bool
    specification: str
    text: str
    hash: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, *, max_bytes: int = MAX_SOURCE_BYTES) -> ProtocolDocument:
        """Parse ``text`` or raise :class:`ProtocolDocumentError` saying what is wrong."""
        if not isinstance(text, str):
            raise ProtocolDocumentError("a document must be text")
        if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
            raise ProtocolDocumentError(f"larger than {max_bytes} bytes")
        meta_text, specification = _split(text)
        metadata = _load_metadata(meta_text)
        name = metadata.get("name")
        description = metadata.get("description")
        multiround = metadata.get("multiround")
        if not isinstance(name, str) or not name.strip():
            raise ProtocolDocumentError("metadata 'name' must be a non-empty string")
        if len(name) > MAX_NAME_CHARS:
            raise ProtocolDocumentError(f"metadata 'name' is longer than {MAX_NAME_CHARS}")
        if not isinstance(description, str):
            raise ProtocolDocumentError("metadata 'description' must be a string")
        if not isinstance(multiround, bool):
            raise ProtocolDocumentError("metadata 'multiround' must be true or false")
        return cls(
            name=name,
            description=description,
            multiround=multiround,
            specification=specification,
            text=text,
            hash=hash_document(text),
            metadata=metadata,
        )


def _split(text: str) -> tuple[str, str]:
    first = _SEPARATOR.search(text)
    if first is None:
        raise ProtocolDocumentError("no '---' line between the metadata and the specification")
    if first.start() == 0:
        closing = _SEPARATOR.search(text, first.end())
        if closing is None:
            raise ProtocolDocumentError("the metadata opened by '---' is never closed")
        meta_text, rest = text[first.end() : closing.start()], text[closing.end() :]
    else:
        meta_text, rest = text[: first.start()], text[first.end() :]
    return meta_text, rest.removeprefix("\n")


def _load_metadata(meta_text: str) -> dict[str, Any]:
    try:
        metadata = yaml.safe_load(meta_text)
    # PyYAML's constructors raise ValueError, TypeError, RecursionError … besides
    # YAMLError on odd input; every one of them means "malformed", none may escape.
    except Exception as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ProtocolDocumentError(f"metadata is not valid YAML ({reason})") from None
    if not isinstance(metadata, dict):
        raise ProtocolDocumentError("metadata must be a YAML mapping")
    return {str(key): value for key, value in metadata.items()}
