"""``agora-hub publish SPACE TEXT``: publish a message, or stream stdin line by line."""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from agora_client.cli.output import Output
from agora_client.cli.run import EXIT_OK, EXIT_USAGE, fail, run
from agora_client.wire import recipients

if TYPE_CHECKING:
    from agora_client.client import Client


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    publish = sub.add_parser(
        "publish",
        parents=[common],
        help="publish a message (or stream stdin) to a space",
        description="Join SPACE and publish TEXT as {\"text\": TEXT}. With TEXT '-', stdin is "
        "streamed as deltas (what arrives within 20 ms is one delta, at most 64 KiB), then "
        "done at end of input (the hub cancels a stream idle for its stream_idle_timeout, "
        "30 s by default). --to addresses it to some members only.",
    )
    publish.add_argument("space", metavar="SPACE")
    publish.add_argument("text", metavar="TEXT", help="the text, or - for stdin as a stream")
    publish.add_argument(
        "--data", metavar="JSON", default=None, help="extra data fields, a JSON object"
    )
    publish.add_argument(
        "--to",
        metavar="AGENT",
        action="append",
        default=None,
        help="deliver only to this member (repeat for several; the others never see it)",
    )
    publish.set_defaults(func=cmd_publish)


def cmd_publish(args: argparse.Namespace) -> int:
    return run(args, _publish)


async def _publish(client: Client, args: argparse.Namespace, out: Output) -> int:
    import orjson

    extra: dict[str, Any] = {}
    if args.data is not None:
        try:
            extra = orjson.loads(args.data)
        except orjson.JSONDecodeError as exc:
            return fail(f"--data is not valid JSON: {exc}", EXIT_USAGE)
        if not isinstance(extra, dict):
            return fail("--data must be a JSON object", EXIT_USAGE)
    try:
        to = None if args.to is None else recipients(args.to[0] if len(args.to) == 1 else args.to)
    except ValueError as exc:
        return fail(f"--to: {exc}", EXIT_USAGE)
    await client.join(args.space)
    if args.text != "-":
        event = await client.publish(args.space, {**extra, "text": args.text}, to=to)
        result = {"space": event.space, "event_id": event.event_id, "seq": event.seq}
    else:
        lines = _stdin_lines()
        stream = client.stream(args.space, data=extra, to=to)
        async with stream:
            while (line := await lines.get()) is not None:
                await stream.send(line)
        if stream.sent == 0:
            print("agora-hub: stdin was empty: nothing published", file=sys.stderr)
            return EXIT_OK
        result = {
            "space": args.space,
            "event_id": stream.hub_event_id,
            "seq": stream.seq,
            "deltas": stream.sent,
            "lines": stream.written,
        }
    if out.json_lines:
        out.json(result)
    else:
        counts = ""
        if "lines" in result:
            counts = f", {result['deltas']} deltas, {result['lines']} lines"
        out.line(
            f"published to {result['space']}: {result['event_id']} (seq {result['seq']}{counts})"
        )
    return EXIT_OK


#: Longest delta read from stdin, in bytes: a longer line is sent in pieces
#: (a single delta must fit the hub's frame limit, 1 MiB by default).
STDIN_CHUNK = 64 * 1024


def _stdin_lines() -> asyncio.Queue[str | None]:
    """Lines of stdin (newline kept), read by a daemon thread; ``None`` at EOF.

    The stream they are sent on coalesces them: lines that arrive together
    (``seq 1 300``, a build's burst of output) go out as a few deltas.

    A line longer than :data:`STDIN_CHUNK` bytes comes in pieces, never cut
    inside a UTF-8 character. A daemon thread rather than the default
    executor: a blocked read must not keep the process alive after the
    command ends. It reads the descriptor itself, not ``sys.stdin.buffer``:
    blocked in that object's ``readline`` it would hold the object's lock, and
    the interpreter's shutdown (Ctrl-C while a terminal is read) would abort
    on it ("could not acquire lock … at interpreter shutdown").
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=256)
    fd = sys.stdin.fileno()

    def read() -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

        def put(raw: bytes, final: bool = False) -> None:
            if text := decoder.decode(raw, final=final):
                asyncio.run_coroutine_threadsafe(queue.put(text), loop).result()

        pending = bytearray()
        try:
            while chunk := os.read(fd, STDIN_CHUNK):
                pending += chunk
                while (end := pending.find(b"\n", 0, STDIN_CHUNK) + 1) or (
                    len(pending) >= STDIN_CHUNK
                ):
                    piece = bytes(pending[: end or STDIN_CHUNK])  # a line, or a piece of one
                    del pending[: len(piece)]
                    put(piece)
            put(bytes(pending), final=True)
        except RuntimeError:  # the loop is gone: the command ended
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(queue.put(None), loop)

    threading.Thread(target=read, name="stdin-reader", daemon=True).start()
    return queue
