"""``agora-hub tail SPACE``: print a space's events as they arrive.

On a terminal one line per event, and streamed events live: one stream at a
time has its deltas appended to its line as they come. Otherwise one JSON
line per event, a streamed one once assembled (``--raw``: every frame as it
comes, deltas too). With reconnects on (the default) a dropped connection
resumes where it was; a line on stderr says when events may be missing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import TYPE_CHECKING, Any

from agora_client.cli.options import add_count, add_no_reconnect
from agora_client.cli.output import Output, clock, compact
from agora_client.cli.run import EXIT_OK, run
from agora_client.wire import MessageType

if TYPE_CHECKING:
    from agora_client.client import Client
    from agora_client.models import AssembledEvent, Event, MembersChanged, StreamChunk


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    tail = sub.add_parser(
        "tail",
        parents=[common],
        help="print a space's events as they arrive",
        description="Join SPACE and print its events. On a terminal, streamed events are "
        "shown live as their deltas arrive; otherwise each event (streams assembled) is "
        "one JSON line. Reconnects when the connection drops and resumes where it was: "
        "events published meanwhile are printed first; if the hub no longer has them, "
        "a line on stderr says so.",
    )
    tail.add_argument("space", metavar="SPACE")
    add_count(tail)
    tail.add_argument(
        "--raw", action="store_true", help="print every frame (deltas too) as a JSON line"
    )
    tail.add_argument("--no-members", action="store_true", help="hide joins and leaves")
    add_no_reconnect(tail)
    tail.set_defaults(func=cmd_tail)


def cmd_tail(args: argparse.Namespace) -> int:
    return run(args, _tail, reconnect=not args.no_reconnect)


async def _tail(client: Client, args: argparse.Namespace, out: Output) -> int:
    from agora_client.assembly import StreamAssembler
    from agora_client.models import Event, MembersChanged, Resumed, StreamChunk
    from agora_client.subscriptions import ALL_KINDS

    # The client's own warning about a rejoin that could not resume says what
    # tail's line below says (with the seq range): one line, not two.
    logging.getLogger("agora_client").addFilter(_not_rejoined)
    kinds = ALL_KINDS - {"members"} if args.no_members else ALL_KINDS
    sub = client.subscribe(args.space, kinds)
    await client.join(args.space)
    printer = TailPrinter(out, raw=args.raw)
    assembler = StreamAssembler(incomplete_timeout=60.0, clock=asyncio.get_running_loop().time)
    printed = 0
    while args.count is None or printed < args.count:
        deadline = assembler.next_deadline()
        timeout = None if deadline is None else max(0.0, deadline - assembler.clock())
        try:
            item = await sub.get(timeout)
        except TimeoutError:
            for gone in assembler.expire():
                printed += printer.assembled(gone)
            continue
        except StopAsyncIteration:
            return EXIT_OK
        if isinstance(item, Event):
            printed += printer.event(item)
        elif isinstance(item, MembersChanged):
            printer.members(item)
        elif isinstance(item, StreamChunk):
            printer.chunk(item)
            done = assembler.feed(item)
            if done is not None:
                printed += printer.assembled(done)
        elif isinstance(item, Resumed) and not item.recovered:
            print(
                f"agora-hub: reconnected to {item.space}: events after #{item.since.seq} "
                f"up to #{item.seq} may be missing (the hub's history "
                f"{'was lost' if item.epoch != item.since.epoch else 'no longer reaches back'})",
                file=sys.stderr,
            )
    return EXIT_OK


def _not_rejoined(record: logging.LogRecord) -> bool:
    from agora_client.receiving import NOT_RECOVERED

    return record.msg is not NOT_RECOVERED


class TailPrinter:
    """How ``tail`` shows what arrives.

    JSON lines: one object per event, a streamed event once assembled
    (``"streamed": true``), a stream that did not complete as
    ``space.event.cancel`` with its ``status``, ``reason`` and the text so far.
    ``raw`` prints every frame as it comes instead (deltas too).

    Terminal: one line per event; one stream at a time is shown live, its
    deltas appended to its line as they arrive; streams that overlap it are
    shown whole when they end.
    """

    def __init__(self, out: Output, *, raw: bool = False):
        self.out = out
        self.raw = raw
        self._live: str | None = None  # the stream being shown live (terminal)
        self._live_broken = False  # something was printed in the middle of it

    # Each returns how many events it printed (for --count).

    def event(self, event: Event) -> int:
        if self.out.json_lines:
            self.out.json(_event_json(event))
        else:
            self._interrupt_live()
            self.out.line(
                f"{clock(event.timestamp)} #{event.seq} {event.sender}: {_body(event.data)}"
            )
        return 1

    def members(self, change: MembersChanged) -> None:
        if self.out.json_lines:
            self.out.json(
                {
                    "type": MessageType.SPACE_MEMBERS,
                    "space": change.space,
                    "members": change.members,
                    "member_count": change.member_count,
                    # As the hub sent it: an id for one change, lists for several.
                    **(
                        {"joined": change.joined, "left": change.left}
                        if len(change.joined_ids) + len(change.left_ids) == 1
                        else {"joined": change.joined_ids, "left": change.left_ids}
                    ),
                }
            )
            return
        self._interrupt_live()
        done = [
            f"{', '.join(ids)} {what}"
            for ids, what in ((change.joined_ids, "joined"), (change.left_ids, "left"))
            if ids
        ]
        self.out.line(
            f"{clock(None)} * {'; '.join(done)} {change.space} "
            f"({change.member_count} member{'' if change.member_count == 1 else 's'})"
        )

    def chunk(self, chunk: StreamChunk) -> None:
        if self.out.json_lines:
            if self.raw:
                self.out.json(_chunk_json(chunk))
            return
        if chunk.kind == "delta":
            if self._live is None and "from" in chunk.data:
                self._live, self._live_broken = chunk.event_id, False
                self.out.fragment(f"{clock(chunk.timestamp)} {chunk.sender} ▸ ")
            if chunk.event_id == self._live:
                if self._live_broken:
                    self.out.fragment(f"{clock(chunk.timestamp)} {chunk.sender} ▸ …")
                    self._live_broken = False
                self.out.fragment(chunk.text)

    def assembled(self, done: AssembledEvent) -> int:
        if self.out.json_lines:
            if self.raw:
                return 1
            self.out.json(_assembled_json(done))
            return 1
        if done.event_id == self._live:
            self._live = None
            if self._live_broken:
                self.out.fragment(f"{clock(done.timestamp)} {done.sender} ▸ …")
            if not done.complete:
                self.out.line(f" [{done.status}: {done.reason}]")
            elif self._live_broken or not done.text.endswith("\n"):
                self.out.line("")
            return 1
        self._interrupt_live()
        mark = "" if done.complete else f" [{done.status}: {done.reason}]"
        self.out.line(
            f"{clock(done.timestamp)} #{done.seq} {done.sender} ▸ {done.text.rstrip(chr(10))}{mark}"
        )
        return 1

    def _interrupt_live(self) -> None:
        if self._live is not None and not self._live_broken:
            self.out.line("")
            self._live_broken = True


def _body(data: dict[str, Any]) -> str:
    text = data.get("text")
    rest = {k: v for k, v in data.items() if k not in ("from", "text")}
    if isinstance(text, str):
        return text + (f"  {compact(rest)}" if rest else "")
    return compact(rest)


def _event_json(event: Event) -> dict[str, Any]:
    return {
        "type": MessageType.SPACE_EVENT,
        "space": event.space,
        "event_id": event.event_id,
        "seq": event.seq,
        "from": event.sender,
        "timestamp": event.timestamp,
        "data": event.data,
    }


def _assembled_json(done: AssembledEvent) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "type": MessageType.SPACE_EVENT if done.complete else MessageType.SPACE_EVENT_CANCEL,
        "space": done.space,
        "event_id": done.event_id,
        "seq": done.seq,
        "from": done.sender,
        "timestamp": done.timestamp,
        "data": done.data,
        "streamed": True,
    }
    if not done.complete:
        obj["status"] = done.status
        obj["reason"] = done.reason
    return obj


def _chunk_json(chunk: StreamChunk) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "type": f"space.event.{chunk.kind}",
        "space": chunk.space,
        "event_id": chunk.event_id,
        "seq": chunk.seq,
        "from": chunk.sender,
        "timestamp": chunk.timestamp,
    }
    if chunk.kind == "delta":
        obj["data"] = chunk.data
    if chunk.reason is not None:
        obj["reason"] = chunk.reason
    return obj
