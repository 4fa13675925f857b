"""Per-caller shares of a node's shared bounds (contract §18).

A gateway bounds what one node holds for all its callers at once — MCP call
slots and sessions, A2A open tasks and streams, HTTP Agora and envelope
waits — so that a flood cannot exhaust the node. Without more, one caller
could take every slot and lock the others out. :class:`Shares` is such a
bound with a ceiling per caller: ``share`` of it (the setting
``caller_share``, a quarter by default; at least one slot).

Who "one caller" is comes from :attr:`hub.adapter_host.Caller.share_key`: the
authenticated agent id, or the client's address when the caller has no
credentials (an id it names itself proves nothing). Past the bound:
:class:`~hub.adapter_host.SlotsFull` (the gateway's 503); past the caller's
share: :class:`ShareExceeded` (its 429), both with ``Retry-After``.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

from adapters import AdapterError
from hub.adapter_host import SlotsFull

#: Seconds a refused caller is told to wait (``Retry-After``).
RETRY_AFTER = 1


class ShareExceeded(AdapterError):
    """The caller holds its whole share of a node's bound already."""

    def __init__(self, what: str, share: int):
        super().__init__(f"you hold {share} {what} on this hub node already")
        self.share = share


class Shares:
    """``limit`` slots on this node; one caller holds at most ``per_caller``."""

    def __init__(self, limit: int, share: float, what: str = "slots"):
        if limit < 1:
            raise ValueError("a bound is at least one slot")
        if not 0 < share <= 1:
            raise ValueError("a caller's share is a fraction of the bound, in (0, 1]")
        self.limit = limit
        self.per_caller = max(1, int(limit * share))
        self.what = what
        self.taken = 0
        self._held: Counter[str] = Counter()

    def __len__(self) -> int:
        return self.taken

    def held(self, key: str) -> int:
        return self._held.get(key, 0)

    def check(self, key: str, extra: int = 0) -> None:
        """Raise unless ``key`` may take one more slot (``extra``: slots being
        taken that are not counted yet)."""
        if self.taken + extra >= self.limit:
            raise SlotsFull(f"{self.taken} {self.what} are taken on this hub node")
        if self._held.get(key, 0) >= self.per_caller:
            raise ShareExceeded(self.what, self.per_caller)

    def take(self, key: str) -> None:
        self.check(key)
        self.taken += 1
        self._held[key] += 1

    def give_back(self, key: str) -> None:
        self.taken -= 1
        left = self._held[key] - 1
        if left > 0:
            self._held[key] = left
        else:
            del self._held[key]

    @contextlib.contextmanager
    def hold(self, key: str) -> Iterator[None]:
        """One slot for ``key`` while the block runs."""
        self.take(key)
        try:
            yield
        finally:
            self.give_back(key)
