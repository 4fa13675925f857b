"""Client tools of ``agora-hub``: ``tail``, ``publish``, ``spaces``, ``agents``.

Output is for people on a terminal and JSON lines otherwise (``--json``
forces JSON). Failures print one line to stderr and exit non-zero:

====  =====================================================================
code  meaning
====  =====================================================================
0     success
1     the hub could not be reached, or the connection was lost
2     bad arguments (argparse usage, invalid ``--agent-id`` or ``--url``)
3     the hub refused this agent (UNAUTHORIZED, AGENT_EXISTS)
4     the hub refused a request (INVALID_REQUEST, SPACE_NOT_FOUND …)
130   interrupted (Ctrl-C)
====  =====================================================================

This module keeps its imports light: ``agora-hub serve`` imports it too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from protocol.messages import MessageType

if TYPE_CHECKING:
    from hub.client.client import Client
    from hub.client.models import AssembledEvent, Event, MembersChanged, StreamChunk

DEFAULT_URL = "ws://127.0.0.1:8765/ws"

EXIT_OK = 0
EXIT_CONNECTION = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_REJECTED = 4


def add_commands(sub: Any) -> None:
    """Add ``tail``, ``publish``, ``spaces`` and ``agents`` to ``agora-hub``'s subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=os.environ.get("AGORA_HUB_URL", DEFAULT_URL),
        help=f"hub WebSocket URL (default {DEFAULT_URL}) [env AGORA_HUB_URL]",
    )
    common.add_argument(
        "--agent-id",
        default=None,
        help="agent id to connect as (default: cli-<random>) [env AGORA_HUB_AGENT_ID]",
    )
    common.add_argument(
        "--token",
        default=os.environ.get("AGORA_HUB_TOKEN"),
        help="auth token, sent as Authorization: Bearer [env AGORA_HUB_TOKEN]",
    )
    common.add_argument(
        "--token-file",
        default=os.environ.get("AGORA_HUB_TOKEN_FILE"),
        metavar="FILE",
        help="read the token from FILE, again on every reconnect and when the hub says it "
        "expired (a token an agent or sidecar keeps fresh) [env AGORA_HUB_TOKEN_FILE]",
    )
    common.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="connect and request timeout (default 10)",
    )
    common.add_argument(
        "--json",
        action="store_true",
        help="print JSON lines even on a terminal",
    )
    common.add_argument(
        "--ca-file",
        metavar="FILE",
        default=None,
        help="trust this CA certificate (PEM) for a wss:// hub with a private CA "
        "(default: the system's CAs, or SSL_CERT_FILE when set)",
    )

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
    tail.add_argument("-n", "--count", type=int, default=None, help="exit after printing N events")
    tail.add_argument(
        "--raw", action="store_true", help="print every frame (deltas too) as a JSON line"
    )
    tail.add_argument("--no-members", action="store_true", help="hide joins and leaves")
    tail.add_argument("--no-reconnect", action="store_true", help="exit when the connection drops")
    tail.set_defaults(func=cmd_tail)

    publish = sub.add_parser(
        "publish",
        parents=[common],
        help="publish a message (or stream stdin) to a space",
        description="Join SPACE and publish TEXT as {\"text\": TEXT}. With TEXT '-', stdin is "
        "streamed line by line as deltas, then done at end of input (the hub cancels a "
        "stream idle for its stream_idle_timeout, 30 s by default).",
    )
    publish.add_argument("space", metavar="SPACE")
    publish.add_argument("text", metavar="TEXT", help="the text, or - for stdin as a stream")
    publish.add_argument(
        "--data", metavar="JSON", default=None, help="extra data fields, a JSON object"
    )
    publish.set_defaults(func=cmd_publish)

    spaces = sub.add_parser("spaces", parents=[common], help="list the hub's spaces")
    spaces.set_defaults(func=cmd_spaces)

    agents = sub.add_parser(
        "agents",
        parents=[common],
        help="watch agents come and go (agent.status), or list them (--list)",
        description="Join agent.status and print every agent that comes online, goes "
        "offline or updates its registration. With --list, print the agents online now "
        "(cluster-wide), optionally those with a capability or in a space, and exit.",
    )
    agents.add_argument(
        "-n", "--count", type=int, default=None, help="exit after printing N events"
    )
    agents.add_argument(
        "--list", action="store_true", help="list the agents online now (agent.list) and exit"
    )
    agents.add_argument(
        "--capability",
        metavar="CAP",
        default=None,
        help="with --list: agents declaring CAP (a prefix when it ends in *)",
    )
    agents.add_argument(
        "--space", metavar="SPACE", default=None, help="with --list: members of SPACE only"
    )
    agents.add_argument(
        "--no-reconnect", action="store_true", help="exit when the connection drops"
    )
    agents.set_defaults(func=cmd_agents)


# ── running a command ───────────────────────────────────────────────────────


def _run(
    args: argparse.Namespace,
    body: Callable[[Client, argparse.Namespace, Output], Awaitable[int]],
    *,
    reconnect: bool = False,
) -> int:
    """Connect, run ``body``, and turn every failure into one line and an exit code."""
    from hub.client.client import Backoff, Client
    from hub.client.errors import (
        AgentExists,
        ConnectionClosed,
        HubClientError,
        HubConnectionError,
        HubRejected,
        RequestTimeout,
        StreamCancelled,
        Unauthorized,
    )

    logging.basicConfig(format="agora-hub: %(message)s", level=logging.WARNING, stream=sys.stderr)
    agent_id = args.agent_id or os.environ.get("AGORA_HUB_AGENT_ID") or _default_agent_id()
    out = Output(sys.stdout, json_lines=args.json or not sys.stdout.isatty())
    try:
        tls = tls_options(args.url, args.ca_file)
        client = Client(
            args.url,
            agent_id,
            token=args.token,
            token_provider=_token_reader(args.token_file) if args.token_file else None,
            reconnect=reconnect,
            backoff=Backoff(initial=0.5, maximum=10.0),
            request_timeout=args.timeout,
            open_timeout=args.timeout,
            **tls,
        )
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)

    async def main() -> int:
        try:
            await client.connect()
        except (Unauthorized, AgentExists) as exc:
            return _fail(f"hub refused agent {agent_id!r}: {exc}", EXIT_REFUSED)
        except HubRejected as exc:
            return _fail(f"hub refused the connection: {exc}", EXIT_CONNECTION)
        try:
            return await body(client, args, out)
        finally:
            await client.aclose()

    try:
        return asyncio.run(main())
    except BrokenPipeError:
        # The reader of our output went away (`| head`): not an error.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except StreamCancelled as exc:
        return _fail(f"stream cancelled: {exc.reason}", EXIT_CONNECTION)
    except ConnectionClosed as exc:
        return _fail(f"connection lost: {exc}", EXIT_CONNECTION)
    except (HubConnectionError, RequestTimeout) as exc:
        return _fail(exc.message, EXIT_CONNECTION)
    except HubRejected as exc:
        return _fail(str(exc), EXIT_REJECTED)
    except HubClientError as exc:
        return _fail(str(exc), EXIT_CONNECTION)


def _token_reader(path: str) -> Callable[[], Awaitable[str]]:
    """A token provider reading ``path`` (surrounding whitespace dropped)."""

    async def read() -> str:
        try:
            token = (await asyncio.to_thread(Path(path).read_text, encoding="utf-8")).strip()
        except OSError as exc:
            raise ValueError(f"cannot read token file {path}: {exc.strerror}") from None
        if not token:
            raise ValueError(f"token file {path} is empty")
        return token

    return read


def tls_options(url: str, ca_file: str | None) -> dict[str, Any]:
    """The ``ssl`` context for a ``wss://`` URL: trusting ``ca_file``, else
    ``SSL_CERT_FILE``, else the system's CAs. ValueError for an unusable file."""
    if not url.startswith("wss://"):
        if ca_file is not None:
            raise ValueError(f"--ca-file is for a wss:// hub, not {url!r}")
        return {}
    import ssl

    cafile = ca_file or os.environ.get("SSL_CERT_FILE") or None
    try:
        return {"ssl": ssl.create_default_context(cafile=cafile)}
    except (OSError, ssl.SSLError) as exc:
        source = "--ca-file" if ca_file else "SSL_CERT_FILE"
        raise ValueError(f"{source} {cafile}: not a readable PEM CA certificate ({exc})") from None


def _fail(message: str, code: int) -> int:
    print(f"agora-hub: {message}", file=sys.stderr)
    return code


def _default_agent_id() -> str:
    return f"cli-{secrets.token_hex(4)}"


# ── commands ────────────────────────────────────────────────────────────────


def cmd_spaces(args: argparse.Namespace) -> int:
    return _run(args, _spaces)


async def _spaces(client: Client, args: argparse.Namespace, out: Output) -> int:
    spaces = await client.spaces()
    if out.json_lines:
        for s in spaces:
            out.json({"id": s.id, "type": s.type, "member_count": s.member_count})
    else:
        rows = [(s.id, s.type, str(s.member_count)) for s in spaces]
        out.table(("SPACE", "TYPE", "MEMBERS"), rows, numeric={2})
    return EXIT_OK


def cmd_publish(args: argparse.Namespace) -> int:
    return _run(args, _publish)


async def _publish(client: Client, args: argparse.Namespace, out: Output) -> int:
    import orjson

    extra: dict[str, Any] = {}
    if args.data is not None:
        try:
            extra = orjson.loads(args.data)
        except orjson.JSONDecodeError as exc:
            return _fail(f"--data is not valid JSON: {exc}", EXIT_USAGE)
        if not isinstance(extra, dict):
            return _fail("--data must be a JSON object", EXIT_USAGE)
    await client.join(args.space)
    if args.text != "-":
        event = await client.publish(args.space, {**extra, "text": args.text})
        result = {"space": event.space, "event_id": event.event_id, "seq": event.seq}
    else:
        lines = _stdin_lines()
        stream = client.stream(args.space, data=extra)
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
        }
    if out.json_lines:
        out.json(result)
    else:
        out.line(f"published to {result['space']}: {result['event_id']} (seq {result['seq']})")
    return EXIT_OK


def _stdin_lines() -> asyncio.Queue[str | None]:
    """Lines of stdin (newline kept), read by a daemon thread; ``None`` at EOF.

    A daemon thread rather than the default executor: a blocked read must
    not keep the process alive after the command ends.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=256)

    def read() -> None:
        stdin = sys.stdin.buffer
        try:
            for raw in iter(stdin.readline, b""):
                text = raw.decode("utf-8", errors="replace")
                asyncio.run_coroutine_threadsafe(queue.put(text), loop).result()
        except RuntimeError:  # the loop is gone: the command ended
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(queue.put(None), loop)

    threading.Thread(target=read, name="stdin-reader", daemon=True).start()
    return queue


def cmd_tail(args: argparse.Namespace) -> int:
    return _run(args, _tail, reconnect=not args.no_reconnect)


async def _tail(client: Client, args: argparse.Namespace, out: Output) -> int:
    from hub.client.models import Event, MembersChanged, Resumed, StreamChunk
    from hub.client.streams import StreamAssembler
    from hub.client.subscriptions import ALL_KINDS

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


def cmd_agents(args: argparse.Namespace) -> int:
    return _run(args, _agents, reconnect=not args.no_reconnect)


async def _agents(client: Client, args: argparse.Namespace, out: Output) -> int:
    if args.list:
        return await _list_agents(client, args, out)
    if args.capability is not None or args.space is not None:
        return _fail("--capability and --space go with --list", EXIT_USAGE)
    sub = client.events("agent.status")
    await client.join("agent.status")
    printed = 0
    while args.count is None or printed < args.count:
        try:
            event = await sub.get()
        except StopAsyncIteration:
            return EXIT_OK
        agent = event.data.get("agent")
        if not isinstance(agent, dict):
            continue
        what = event.data.get("event")
        if out.json_lines:
            out.json({"event": what, "agent": agent, "timestamp": event.timestamp})
        else:
            details = []
            if agent.get("type"):
                details.append(f"type={agent['type']}")
            if agent.get("capabilities"):
                details.append("capabilities=" + ",".join(map(str, agent["capabilities"])))
            if agent.get("metadata"):
                details.append(f"metadata={_compact(agent['metadata'])}")
            out.line(
                f"{_clock(event.timestamp)} {what!s:<8} {agent.get('id')}"
                + (f"  ({' '.join(details)})" if details else "")
            )
        printed += 1
    return EXIT_OK


async def _list_agents(client: Client, args: argparse.Namespace, out: Output) -> int:
    agents = await client.find_agents(capability=args.capability, space=args.space)
    if out.json_lines:
        for a in agents:
            out.json(
                {
                    "id": a.id,
                    "type": a.type,
                    "capabilities": a.capabilities,
                    "metadata": a.metadata,
                    "node": a.node,
                    "connected_at": a.connected_at,
                }
            )
        return EXIT_OK
    rows = [
        (
            a.id,
            a.type or "-",
            a.node,
            _since(a.connected_at),
            ",".join(a.capabilities) or "-",
        )
        for a in agents
    ]
    out.table(("AGENT", "TYPE", "NODE", "CONNECTED", "CAPABILITIES"), rows)
    return EXIT_OK


def _since(timestamp_ms: int | None) -> str:
    if timestamp_ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp_ms / 1000))


# ── output ──────────────────────────────────────────────────────────────────


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
                f"{_clock(event.timestamp)} #{event.seq} {event.sender}: {_body(event.data)}"
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
                    "joined": change.joined,
                    "left": change.left,
                }
            )
            return
        self._interrupt_live()
        who, what = (change.joined, "joined") if change.joined else (change.left, "left")
        self.out.line(
            f"{_clock(None)} * {who} {what} {change.space} "
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
                self.out.fragment(f"{_clock(chunk.timestamp)} {chunk.sender} ▸ ")
            if chunk.event_id == self._live:
                if self._live_broken:
                    self.out.fragment(f"{_clock(chunk.timestamp)} {chunk.sender} ▸ …")
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
                self.out.fragment(f"{_clock(done.timestamp)} {done.sender} ▸ …")
            if not done.complete:
                self.out.line(f" [{done.status}: {done.reason}]")
            elif self._live_broken or not done.text.endswith("\n"):
                self.out.line("")
            return 1
        self._interrupt_live()
        mark = "" if done.complete else f" [{done.status}: {done.reason}]"
        self.out.line(
            f"{_clock(done.timestamp)} #{done.seq} {done.sender} ▸ {done.text.rstrip(chr(10))}"
            f"{mark}"
        )
        return 1

    def _interrupt_live(self) -> None:
        if self._live is not None and not self._live_broken:
            self.out.line("")
            self._live_broken = True


def _clock(timestamp_ms: int | None) -> str:
    seconds = timestamp_ms / 1000 if timestamp_ms is not None else time.time()
    return time.strftime("%H:%M:%S", time.localtime(seconds))


def _compact(obj: Any) -> str:
    import orjson

    return orjson.dumps(obj).decode()


def _body(data: dict[str, Any]) -> str:
    text = data.get("text")
    rest = {k: v for k, v in data.items() if k not in ("from", "text")}
    if isinstance(text, str):
        return text + (f"  {_compact(rest)}" if rest else "")
    return _compact(rest)


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
