"""The Agora hub wire protocol: pure data, no I/O.

- :mod:`protocol.errors` — error codes, close codes, :class:`ProtocolError`.
- :mod:`protocol.names` — agent id and space naming rules.
- :mod:`protocol.messages` — pydantic models of every message, both directions.
- :mod:`protocol.codec` — frame bytes ⇄ messages (orjson).
"""

from protocol.errors import CloseCode, ErrorCode, ProtocolError

__all__ = ["CloseCode", "ErrorCode", "ProtocolError"]
