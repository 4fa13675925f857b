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

One module per tool (:mod:`~agora_client.cli.tail`,
:mod:`~agora_client.cli.publish`, and :mod:`~agora_client.cli.directory` for
``spaces`` and ``agents``), each with its arguments; the flags they share
(:mod:`~agora_client.cli.options`), connecting and exit codes
(:mod:`~agora_client.cli.run`), and printing (:mod:`~agora_client.cli.output`).

The server's ``agora-hub`` adds these commands to its own (:func:`add_commands`);
installed alone, the client offers them as ``agora-hub-client`` (:func:`main`).
This package keeps its imports light: ``agora-hub serve`` imports it too.
"""

from __future__ import annotations

import argparse
from typing import Any

from agora_client.cli import directory, publish, tail
from agora_client.cli.directory import (
    _list_agents,  # noqa: F401 (tests call it directly)
    cmd_agents,
    cmd_spaces,
)
from agora_client.cli.options import DEFAULT_URL, common_options, tls_options
from agora_client.cli.output import Output
from agora_client.cli.publish import cmd_publish
from agora_client.cli.run import EXIT_CONNECTION, EXIT_OK, EXIT_REFUSED, EXIT_REJECTED, EXIT_USAGE
from agora_client.cli.tail import TailPrinter, cmd_tail

__all__ = [
    "DEFAULT_URL",
    "EXIT_CONNECTION",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_REJECTED",
    "EXIT_USAGE",
    "Output",
    "TailPrinter",
    "add_commands",
    "cmd_agents",
    "cmd_publish",
    "cmd_spaces",
    "cmd_tail",
    "main",
    "tls_options",
]


def add_commands(sub: Any) -> None:
    """Add ``tail``, ``publish``, ``spaces`` and ``agents`` to ``agora-hub``'s subparsers."""
    common = common_options()
    tail.add_parser(sub, common)
    publish.add_parser(sub, common)
    directory.add_parsers(sub, common)


def main(argv: list[str] | None = None) -> int:
    """``agora-hub-client``: the client tools without the server."""
    from agora_client._version import __version__

    parser = argparse.ArgumentParser(
        prog="agora-hub-client", description="Client tools for Agora Hub."
    )
    parser.add_argument("--version", action="version", version=f"agora-hub-client {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    add_commands(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
