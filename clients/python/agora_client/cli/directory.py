"""``agora-hub spaces`` and ``agora-hub agents``: what and who is on the hub.

``spaces`` lists the spaces with their member counts. ``agents`` watches
``agent.status`` (agents coming online, going offline, updating their
registration), or with ``--list`` prints the agent directory — cluster-wide,
filtered by capability or space — and exits.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from agora_client.cli.options import add_count, add_no_reconnect, throwaway_id
from agora_client.cli.output import Output, clock, compact
from agora_client.cli.run import EXIT_OK, EXIT_USAGE, fail, run

if TYPE_CHECKING:
    from agora_client.client import Client


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
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
    add_count(agents)
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
    add_no_reconnect(agents)
    agents.set_defaults(func=cmd_agents)


def cmd_spaces(args: argparse.Namespace) -> int:
    return run(args, _spaces)


async def _spaces(client: Client, args: argparse.Namespace, out: Output) -> int:
    spaces = await client.spaces()
    if out.json_lines:
        for s in spaces:
            out.json({"id": s.id, "type": s.type, "member_count": s.member_count})
    else:
        rows = [(s.id, s.type, str(s.member_count)) for s in spaces]
        out.table(("SPACE", "TYPE", "MEMBERS"), rows, numeric={2})
    return EXIT_OK


def cmd_agents(args: argparse.Namespace) -> int:
    return run(args, _agents, reconnect=not args.no_reconnect)


async def _agents(client: Client, args: argparse.Namespace, out: Output) -> int:
    if args.list:
        return await _list_agents(client, args, out)
    if args.capability is not None or args.space is not None:
        return fail("--capability and --space go with --list", EXIT_USAGE)
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
                details.append(f"metadata={compact(agent['metadata'])}")
            out.line(
                f"{clock(event.timestamp)} {what!s:<8} {agent.get('id')}"
                + (f"  ({' '.join(details)})" if details else "")
            )
        printed += 1
    return EXIT_OK


async def _list_agents(client: Client, args: argparse.Namespace, out: Output) -> int:
    found = await client.find_agents(capability=args.capability, space=args.space)
    # The tool's own throwaway connection is not one of the agents asked about.
    agents = [a for a in found if a.id != client.agent_id or not throwaway_id(args)]
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
