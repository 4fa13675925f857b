"""Identifiers the node makes: connection ids and event ids.

Unique per node by a random tag and a counter; unique in the cluster because
every node draws its own tag.
"""

from __future__ import annotations

import itertools
import secrets


class Ids:
    __slots__ = ("_count", "tag")

    def __init__(self) -> None:
        self.tag = secrets.token_hex(4)
        self._count = itertools.count(1)

    def connection_id(self, prefix: str = "ws") -> str:
        return f"{prefix}-{self.tag}-{next(self._count):x}"

    def event_id(self) -> str:
        return f"evt-{self.tag}-{next(self._count):x}"
