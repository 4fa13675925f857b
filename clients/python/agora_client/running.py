"""Running an agent as a program: :func:`run`, ``asyncio.run`` that ends cleanly.

An agent's ``main()`` ends in one of three ways a person at a terminal cares
about: it finishes, someone presses Ctrl-C, or the hub makes it stop (the
agent id is taken, the token is refused, the hub cannot be reached). The last
two should read as one line, not a traceback: the line says what happened and
the exception's message what to change (``AgentExists`` names the agent id
and says to pick another).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from agora_client.errors import HubClientError

T = TypeVar("T")

#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130
#: Exit status when the hub refused or lost the agent.
EXIT_HUB_ERROR = 1


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, ending without a traceback on Ctrl-C and hub errors.

    Returns what ``main`` returns. Ctrl-C exits with status 130 (the client's
    ``async with`` has closed the connection by then). A
    :class:`~agora_client.errors.HubClientError` that ends ``main`` is printed
    as one line on stderr and exits with status 1. Any other exception is a
    bug in the agent and keeps its traceback.
    """
    try:
        return asyncio.run(main)
    except KeyboardInterrupt:
        raise SystemExit(EXIT_INTERRUPTED) from None
    except HubClientError as exc:
        print(f"{Path(sys.argv[0]).name or 'agent'}: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_HUB_ERROR) from None
