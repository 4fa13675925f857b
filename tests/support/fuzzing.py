"""What ``make fuzz`` (:mod:`tests.fuzz`) and ``make fuzz-http`` (:mod:`tests.fuzz_http`) share.

Both run several seeded drivers at once against one hub process, each on its
own connection(s) with ``random.Random(seed * 1000 + i)``, merge what they
saw into one :class:`Report`, read the hub's log for tracebacks and errors,
and print a summary whose last line is ``OK`` or the number of problems.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

#: Problems kept per run: the first ones say enough.
MAX_PROBLEMS = 50


@dataclass
class Report:
    """Cases sent, by kind, and the problems found; a fuzzer's report adds
    its own counts (``int`` fields add up, ``Counter`` fields merge)."""

    by_kind: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)

    def merge(self, other: Report) -> None:
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name == "problems":
                mine.extend(theirs[: MAX_PROBLEMS - len(mine)])
            elif isinstance(mine, Counter):
                mine.update(theirs)
            else:
                setattr(self, f.name, mine + theirs)


R = TypeVar("R", bound=Report)


async def run_drivers(
    drive: Callable[[int, random.Random], Awaitable[R]], total: R, *, seed: int, connections: int
) -> R:
    """``drive(i, rng)`` for each of ``connections`` at once, merged into ``total``."""
    reports = await asyncio.gather(
        *(drive(i, random.Random(seed * 1000 + i)) for i in range(connections))
    )
    for report in reports:
        total.merge(report)
    return total


def log_problems(lines: list[dict[str, Any]], raw: str) -> list[str]:
    """Tracebacks or error-level lines in a hub's log."""
    found = [
        f"log: {line.get('event')}: {str(line.get('exception', ''))[-300:]}"
        for line in lines
        if line.get("level") in ("error", "critical") or "exception" in line
    ]
    if "Traceback" in raw and not found:
        found.append("log holds a traceback")
    return found


def print_summary(
    report: Report,
    *,
    seed: int,
    sent: str,
    count: int,
    connections: int,
    elapsed: float,
    counts: Mapping[str, dict[Any, int]],
) -> int:
    """Print what the run did (``count`` cases called ``sent``) and its
    problems; the exit code: 1 when there are any."""
    print(
        f"seed {seed}: {count} {sent} on {connections} connections "
        f"in {elapsed:.1f} s ({count / elapsed:,.0f}/s)"
    )
    print("kinds:", dict(report.by_kind.most_common()))
    for name, counted in counts.items():
        print(f"{name}:", counted)
    for p in report.problems:
        print("PROBLEM:", p)
    print("OK" if not report.problems else f"{len(report.problems)} problem(s)")
    return 1 if report.problems else 0
