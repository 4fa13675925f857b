"""Where the client is in each space it joined, so that a rejoin resumes from there.

A space's position is its history ``epoch`` and the last ``seq`` received.
``space.joined`` sets it — it reaches the reader before anything of the
space that follows it — and every event or stream frame received moves it
on. After a reconnect each space is joined again ``since`` that position;
the hub replays what was published meanwhile, and the ``space.joined`` of
the rejoin says whether it could (``recovered``): the rejoin is then
reported as a :class:`~agora_client.models.Resumed`.

``agent.status`` is the exception: it is rejoined from now, not resumed.
Its events describe presence — who is online — and replayed after a
reconnect they are stale news told as if it were happening now, the agent's
own ``offline`` (its old connection's) among them. What a watcher needs
after a gap is the current state, which the directory gives
(``find_agents()``); so the rejoin is reported as a :class:`Resumed` with
``recovered=False`` (events of the gap were not replayed), and from then on
the live events follow. The hub keeps and replays the space's history as for
any space (``since`` from a client that asks, ``space.history``): it is the
client's resume that skips it, because only the client knows its position
came from before a reconnect.

Pure bookkeeping, fed by the client's reader and by its requests: no I/O.
"""

from __future__ import annotations

from typing import Any

from agora_client.models import JoinResult, MembersChanged, Position, Resumed
from agora_client.wire import AGENT_STATUS_SPACE, MessageType

#: Spaces rejoined from now after a reconnect, not resumed (see above).
NOT_RESUMED = frozenset({AGENT_STATUS_SPACE})


def join_message(space: str, since: Position | None) -> dict[str, Any]:
    """``space.join``, resuming from ``since`` when given."""
    msg: dict[str, Any] = {"type": MessageType.SPACE_JOIN, "space": space}
    if since is not None:
        msg["since"] = {"seq": since.seq, "epoch": since.epoch}
    return msg


class JoinedSpaces:
    """The spaces joined, in join order, with their members and positions."""

    def __init__(self) -> None:
        self._joined: dict[str, None] = {}  # insertion-ordered set
        self._members: dict[str, list[str]] = {}
        self._last_seq: dict[str, int] = {}
        self._epochs: dict[str, str] = {}
        #: Rejoins in flight, by space: the position each resumes from.
        self.resuming: dict[str, Position] = {}

    def __contains__(self, space: object) -> bool:
        return space in self._joined

    def names(self) -> list[str]:
        """The spaces joined, in the order they were first joined."""
        return list(self._joined)

    def members(self, space: str) -> list[str] | None:
        members = self._members.get(space)
        return list(members) if members is not None else None

    def last_seq(self, space: str) -> int | None:
        return self._last_seq.get(space)

    def position(self, space: str) -> Position | None:
        epoch, seq = self._epochs.get(space), self._last_seq.get(space)
        return Position(epoch, seq) if epoch is not None and seq is not None else None

    # ── from the requests ────────────────────────────────────────────────

    def joined(self, space: str, reply: dict[str, Any], resuming: bool = False) -> JoinResult:
        """The hub's reply to ``space.join``: the space is joined."""
        members = [m for m in reply.get("members") or () if isinstance(m, str)]
        count = reply.get("member_count")
        count = count if isinstance(count, int) and not isinstance(count, bool) else 0
        self._joined[space] = None
        self._members[space] = members
        self.resuming.pop(space, None)
        epoch, seq = reply.get("epoch"), reply.get("seq")
        recovered = reply.get("recovered") if resuming else None
        if not isinstance(epoch, str) or not isinstance(seq, int) or isinstance(seq, bool):
            epoch = seq = None  # a hub without history
        return JoinResult(
            space,
            members,
            count,
            epoch,
            seq,
            recovered if isinstance(recovered, bool) else None,
        )

    def left(self, space: str) -> None:
        self._joined.pop(space, None)
        self._members.pop(space, None)
        self._epochs.pop(space, None)
        self._last_seq.pop(space, None)

    def rejoining(self, space: str) -> Position | None:
        """A rejoin of ``space`` is sent: from where (None: from now)."""
        since = self.position(space)
        if since is not None:
            self.resuming[space] = since
        return None if space in NOT_RESUMED else since

    def rejoin_refused(self, space: str) -> None:
        """The hub refused the rejoin: the space is no longer joined."""
        self._joined.pop(space, None)
        self.resuming.pop(space, None)

    # ── from the reader ──────────────────────────────────────────────────

    def seen(self, space: str, seq: int) -> None:
        """An event or stream frame of ``space`` with this ``seq`` arrived."""
        if seq > self._last_seq.get(space, -1):
            self._last_seq[space] = seq

    def members_changed(self, change: MembersChanged) -> None:
        if change.space in self._joined and change.members is not None:
            self._members[change.space] = change.members

    def on_joined(self, f: dict[str, Any]) -> Resumed | None:
        """``space.joined``: where this client now is in the space; a
        :class:`Resumed` when it ends a rejoin after a reconnect."""
        space, epoch, seq = f.get("space"), f.get("epoch"), f.get("seq")
        if not isinstance(space, str) or not isinstance(epoch, str):
            return None
        if not isinstance(seq, int) or isinstance(seq, bool):
            return None
        recovered = f.get("recovered") is True
        if not recovered:
            # A fresh start from here (a recovered join's replay moves the
            # position itself, event by event, as it arrives).
            self._epochs[space] = epoch
            self._last_seq[space] = seq
        since = self.resuming.pop(space, None)
        if since is not None:
            return Resumed(space, recovered, since, epoch, seq)
        return None
