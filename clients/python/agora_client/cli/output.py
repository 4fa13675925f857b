"""How the tools print: plain lines and aligned tables for people, JSON lines otherwise.

A tool prints for people when stdout is a terminal and JSON lines when it is
not (a pipe, a file), or always with ``--json``: one object per line, so
``jq`` and line-oriented tools take it as it comes.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any, TextIO


class Output:
    """Where command output goes: plain lines, JSON lines, or live fragments."""

    def __init__(self, stream: TextIO, *, json_lines: bool):
        self.stream = stream
        self.json_lines = json_lines

    def line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def fragment(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def json(self, obj: dict[str, Any]) -> None:
        import orjson

        self.stream.write(orjson.dumps(obj).decode() + "\n")
        self.stream.flush()

    def table(
        self, header: tuple[str, ...], rows: list[tuple[str, ...]], numeric: Collection[int] = ()
    ) -> None:
        """Aligned columns, two spaces apart, ``numeric`` ones to the right."""
        widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
        for row in (header, *rows):
            cells = [
                v.rjust(w) if i in numeric else v.ljust(w)
                for i, (v, w) in enumerate(zip(row, widths, strict=True))
            ]
            self.line("  ".join(cells).rstrip())


def clock(timestamp_ms: int | None) -> str:
    """The local time of day of a hub timestamp (now, without one)."""
    seconds = timestamp_ms / 1000 if timestamp_ms is not None else time.time()
    return time.strftime("%H:%M:%S", time.localtime(seconds))


def compact(obj: Any) -> str:
    """``obj`` as one line of JSON."""
    import orjson

    return orjson.dumps(obj).decode()
