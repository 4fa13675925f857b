"""Which spaces exist, and the rules for joining them.

A user space exists while it has members anywhere in the cluster, or always
when it is declared in the config file. System spaces exist only when the hub
provides them; ``agent.status`` always does. Who is in a space on this node is
the registry's (:mod:`hub.core.registry`); pure rules here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from protocol.errors import ErrorCode, ProtocolError
from protocol.names import AGENT_STATUS_SPACE, SpaceKind, space_kind


class Declared(Protocol):
    """What the directory reads of a declared space (``[[spaces]]``)."""

    @property
    def capacity(self) -> int | None: ...


class SpaceDirectory:
    def __init__(
        self,
        declared: Mapping[str, Declared],
        default_capacity: int,
        auto_create: bool,
        *,
        system: Iterable[str] = (),
    ):
        self.declared = declared
        #: ``agent.status``, and those the hosted adapters provide (``mcp.calls``).
        self.system: frozenset[str] = frozenset({AGENT_STATUS_SPACE, *system})
        self.default_capacity = default_capacity
        self.auto_create = auto_create

    # ── rules ───────────────────────────────────────────────────────────

    def capacity(self, space: str) -> int:
        declared = self.declared.get(space)
        if declared is not None and declared.capacity is not None:
            return declared.capacity
        return self.default_capacity

    def persistent(self, space: str) -> bool:
        """Exists even without members."""
        return space in self.declared or space in self.system

    def check_joinable(self, space: str, request_id: str | int | None) -> SpaceKind:
        kind = space_kind(space)
        if kind is SpaceKind.SYSTEM:
            if space not in self.system:
                raise ProtocolError(
                    ErrorCode.SPACE_NOT_FOUND, f"system space {space!r} does not exist", request_id
                )
        elif not self.auto_create and space not in self.declared:
            raise ProtocolError(
                ErrorCode.SPACE_NOT_FOUND,
                f"space {space!r} does not exist (spaces are not created on join here)",
                request_id,
            )
        return kind
