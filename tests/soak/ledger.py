"""What the soak saw: every acknowledged event, every agent's deliveries, the verdict.

An event counts once it was *acknowledged* to its publisher (the publish
returned it, possibly as the duplicate answer to a retry). It is *expected*
at every agent of its space that had joined before it (its seq is above
the agent's first ``space.joined`` seq) — except inside the windows where
that agent rejoined with ``recovered: false`` (the hub said it could not
replay them). Agents fall in three categories:

* **stayed** — never lost its connection;
* **resumed** — reconnected, and every rejoin said ``recovered: true``;
* **resumed, not recovered** — at least one rejoin said ``recovered: false``
  (only the events outside those windows are expected).

Per category: *expected* (event × agent pairs), *delivered* (received at
least once), *lost* (expected, never received) and *duplicated* (received
more than once). Any loss or duplicate fails the run.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

CATEGORIES = ("stayed", "resumed", "resumed, not recovered")


@dataclass
class AgentLog:
    agent_id: str
    space: str
    join_seq: int | None = None
    received: Counter[str] = field(default_factory=Counter)
    excused: list[tuple[int, int]] = field(default_factory=list)  # (since, seq]
    rejoins: int = 0
    gone: str | None = None  # why the client stopped for good
    gone_after: int = 0  # its last seq then: nothing later is expected

    @property
    def category(self) -> str:
        if self.excused:
            return CATEGORIES[2]
        return CATEGORIES[1] if self.rejoins else CATEGORIES[0]

    def expects(self, seq: int) -> bool:
        if self.join_seq is None or seq <= self.join_seq:
            return False
        if self.gone is not None and seq > self.gone_after:
            return False
        return not any(since < seq <= upto for since, upto in self.excused)


@dataclass
class PublishLog:
    sent: int = 0
    acknowledged: int = 0
    failed: int = 0
    retries: int = 0
    duplicate_answers: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    # space -> [(seq, event_id)], in acknowledgement order
    events: dict[str, list[tuple[int, str]]] = field(default_factory=dict)

    def acked(self, space: str, seq: int, event_id: str) -> None:
        self.acknowledged += 1
        self.events.setdefault(space, []).append((seq, event_id))


@dataclass
class Row:
    agents: int = 0
    expected: int = 0
    delivered: int = 0
    lost: int = 0
    duplicated: int = 0


def tally(agents: list[AgentLog], publishes: PublishLog) -> dict[str, Row]:
    rows = {c: Row() for c in CATEGORIES}
    by_space: dict[str, list[AgentLog]] = {}
    for agent in agents:
        by_space.setdefault(agent.space, []).append(agent)
        row = rows[agent.category]
        row.agents += 1
        row.duplicated += sum(n - 1 for n in agent.received.values() if n > 1)
    for space, events in publishes.events.items():
        for seq, event_id in events:
            for agent in by_space.get(space, ()):
                if not agent.expects(seq):
                    continue
                row = rows[agent.category]
                row.expected += 1
                if agent.received[event_id]:
                    row.delivered += 1
                else:
                    row.lost += 1
    return rows


def seqs_increase(publishes: PublishLog) -> list[str]:
    """Spaces whose acknowledged seqs did not strictly increase (one publisher each)."""
    bad = []
    for space, events in publishes.events.items():
        seqs = [s for s, _ in events]
        if any(b <= a for a, b in itertools.pairwise(seqs)):
            bad.append(space)
    return bad


def table(rows: dict[str, Row], publishes: PublishLog) -> str:
    lines = [
        f"publishes: sent {publishes.sent}, acknowledged {publishes.acknowledged}, "
        f"failed {publishes.failed}, retried {publishes.retries} times, "
        f"answered as duplicates {publishes.duplicate_answers}",
        "",
        "| agents | count | expected | delivered | lost | duplicated |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    total = Row()
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row.agents} | {row.expected} | {row.delivered} | {row.lost} "
            f"| {row.duplicated} |"
        )
        for attr in ("agents", "expected", "delivered", "lost", "duplicated"):
            setattr(total, attr, getattr(total, attr) + getattr(row, attr))
    lines.append(
        f"| **all** | {total.agents} | {total.expected} | {total.delivered} | {total.lost} "
        f"| {total.duplicated} |"
    )
    return "\n".join(lines)


def losers(agents: list[AgentLog], publishes: PublishLog, limit: int = 5) -> list[str]:
    """The first agents that lost events, with what they missed (to debug a failure)."""
    out = []
    for agent in agents:
        missing = [
            seq
            for seq, event_id in publishes.events.get(agent.space, ())
            if agent.expects(seq) and not agent.received[event_id]
        ]
        if missing:
            out.append(
                f"{agent.agent_id} ({agent.space}, joined at {agent.join_seq}, "
                f"{agent.rejoins} rejoins, excused {agent.excused}, gone {agent.gone}): "
                f"missing {len(missing)}: {missing[:10]}"
            )
            if len(out) >= limit:
                break
    return out


def failed(rows: dict[str, Row]) -> bool:
    return any(row.lost or row.duplicated for row in rows.values())


def summary(agents: list[AgentLog]) -> dict[str, Any]:
    return {
        "rejoins": sum(a.rejoins for a in agents),
        "not recovered": sum(len(a.excused) for a in agents),
        "agents gone": Counter(a.gone for a in agents if a.gone),
    }
