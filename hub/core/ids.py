"""Identifiers the node makes: connection ids and event ids.

Unique per node by a random tag and a counter; unique in the cluster because
every node draws its own tag.

An event id is also what an answer names (``data.in_reply_to``), and members
read one another's ids, so an event id must say nothing of the next one
(contract §18): after the counter it carries 64 bits from the operating
system's CSPRNG. They are drawn in blocks — one ``os.urandom`` call per
:data:`RANDOM_BLOCK` ids — so the hot path makes no system call per event.
"""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import Iterator

#: Random bytes in an event id.
RANDOM_BYTES = 8
#: Event ids per ``os.urandom`` call.
RANDOM_BLOCK = 512


class Ids:
    __slots__ = ("_count", "_randoms", "tag")

    def __init__(self) -> None:
        self.tag = secrets.token_hex(4)
        self._count = itertools.count(1)
        self._randoms: Iterator[str] = iter(())

    def connection_id(self, prefix: str = "ws") -> str:
        return f"{prefix}-{self.tag}-{next(self._count):x}"

    def event_id(self) -> str:
        random = next(self._randoms, None)
        if random is None:
            self._randoms = _random_block()
            random = next(self._randoms)
        return f"evt-{self.tag}-{next(self._count):x}-{random}"


def _random_block() -> Iterator[str]:
    """:data:`RANDOM_BLOCK` random parts of ids, drawn in one system call."""
    block = os.urandom(RANDOM_BYTES * RANDOM_BLOCK).hex()
    step = 2 * RANDOM_BYTES
    return iter([block[i : i + step] for i in range(0, len(block), step)])
