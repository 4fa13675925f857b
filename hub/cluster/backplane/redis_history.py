"""The Redis backplane's reads: a space's position and its history.

Each read is one script (:data:`~hub.cluster.backplane.redis_scripts.POSITION_LUA`,
:data:`~hub.cluster.backplane.redis_scripts.HISTORY_LUA`) that first makes sure the
space has an epoch and a seq, so what it returns is taken atomically with the
position it reports. History entries are channel messages; they are parsed
here like the pump parses live ones (:func:`~hub.cluster.backplane.redis_scripts.parse_message`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hub.cluster.backplane.base import History, Position, complete_streams
from hub.cluster.backplane.redis_scripts import Scripts, SpaceKeys, parse_message
from hub.cluster.redis_store import as_unavailable


class HistoryReader:
    """Position and history reads of one backplane."""

    def __init__(
        self,
        client: Any,
        keys: SpaceKeys,
        scripts: Scripts,
        *,
        seq_ttl: int,
        candidate: Callable[[], str],
        observed: Callable[[str, str, int], None],
    ):
        self._keys = keys
        self._seq_ttl = seq_ttl
        self._candidate = candidate
        self._observed = observed
        self._position_script = client.register_script(scripts.position)
        self._history_script = client.register_script(scripts.history)

    async def position(self, space: str) -> Position:
        with as_unavailable("position"):
            reply = await self._position_script(
                keys=self._keys.position(space), args=[self._candidate(), self._seq_ttl]
            )
        epoch, seq = reply
        position = Position(_text(epoch), int(seq))
        self._observed(space, position.epoch, position.seq)
        return position

    async def history(
        self, space: str, *, after: int | None, before: int | None, limit: int, streams: bool
    ) -> History:
        if after is not None:
            mode, bound = "after", after
        elif before is not None:
            mode, bound = "before", before
        else:
            mode, bound = "newest", 0
        scan = "1" if streams and after is not None else "0"
        args = [self._candidate(), self._seq_ttl, mode, bound, max(0, limit), scan]
        with as_unavailable("history"):
            reply = await self._history_script(keys=self._keys.position(space), args=args)
        history = history_from(space, reply, newest_first=mode != "after", streams=scan == "1")
        self._observed(space, history.epoch, history.seq)
        return history


def history_from(space: str, reply: Any, newest_first: bool, streams: bool) -> History:
    """A History from the reply of :data:`~hub.cluster.backplane.redis_scripts.HISTORY_LUA`."""
    epoch, seq, oldest, msgs, scanned = reply
    events = [parse_message(space, m)[0] for m in msgs]
    if newest_first:
        events.reverse()
    if scanned is not None:
        complete = frozenset(_text(s) for s in scanned)
    else:  # the page holds the whole window (or no scan was asked for)
        complete = complete_streams(events) if streams else frozenset()
    return History(
        _text(epoch),
        int(seq),
        events,
        int(oldest) if oldest is not None else None,
        complete,
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
