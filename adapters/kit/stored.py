"""Records the adapters keep in the cluster's key-value store: keys and reading back.

Every node reads what any node wrote (a conversation, an MCP session, what an
A2A bridge remembers), and a record may have been written by another version
of the hub or be cut short: what cannot be read is treated as absent, never
raised.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson


def hashed_key(prefix: str, *parts: str) -> str:
    """``prefix`` and the SHA-256 of ``parts``: ids may contain ``:`` and
    names anything, so the tuple is hashed rather than joined."""
    return prefix + hashlib.sha256(orjson.dumps(list(parts))).hexdigest()


def json_object(raw: bytes | None) -> dict[str, Any] | None:
    """The JSON object stored as ``raw``; ``None`` when there is none or it
    is not one."""
    if raw is None:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
