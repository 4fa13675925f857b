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

One module per tool (:mod:`~hub.client.cli.tail`,
:mod:`~hub.client.cli.publish`, and :mod:`~hub.client.cli.directory` for
``spaces`` and ``agents``), each with its arguments; the flags they share
(:mod:`~hub.client.cli.options`), connecting and exit codes
(:mod:`~hub.client.cli.run`), and printing (:mod:`~hub.client.cli.output`).

This package keeps its imports light: ``agora-hub serve`` imports it too.
"""

from __future__ import annotations

from typing import Any

from hub.client.cli import directory, publish, tail
from hub.client.cli.directory import (
    _list_agents,  # noqa: F401 (tests call it directly)
    cmd_agents,
    cmd_spaces,
)
from hub.client.cli.options import DEFAULT_URL, common_options, tls_options
from hub.client.cli.output import Output
from hub.client.cli.publish import cmd_publish
from hub.client.cli.run import EXIT_CONNECTION, EXIT_OK, EXIT_REFUSED, EXIT_REJECTED, EXIT_USAGE
from hub.client.cli.tail import TailPrinter, cmd_tail

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
    "tls_options",
]


def add_commands(sub: Any) -> None:
    """Add ``tail``, ``publish``, ``spaces`` and ``agents`` to ``agora-hub``'s subparsers."""
    common = common_options()
    tail.add_parser(sub, common)
    publish.add_parser(sub, common)
    directory.add_parsers(sub, common)
