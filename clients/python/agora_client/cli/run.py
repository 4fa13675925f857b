"""Running one tool: connect, run its body, and turn every failure into an exit code.

A failure prints one line to stderr, ``agora-hub: …``, and exits with the
code of what went wrong (the table is in :mod:`agora_client.cli`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from agora_client.cli.options import agent_id, tls_options, token_reader
from agora_client.cli.output import Output

if TYPE_CHECKING:
    from agora_client.client import Client

EXIT_OK = 0
EXIT_CONNECTION = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_REJECTED = 4

Body = Callable[["Client", argparse.Namespace, Output], Awaitable[int]]


def run(args: argparse.Namespace, body: Body, *, reconnect: bool = False) -> int:
    """Connect, run ``body``, and turn every failure into one line and an exit code."""
    from agora_client.client import Client
    from agora_client.errors import (
        AgentExists,
        ConnectionClosed,
        HubClientError,
        HubConnectionError,
        HubRejected,
        RequestTimeout,
        StreamCancelled,
        Unauthorized,
    )
    from agora_client.keepalive import Backoff

    logging.basicConfig(format="agora-hub: %(message)s", level=logging.WARNING, stream=sys.stderr)
    agent = agent_id(args)
    out = Output(sys.stdout, json_lines=args.json or not sys.stdout.isatty())
    try:
        tls = tls_options(args.url, args.ca_file)
        client = Client(
            args.url,
            agent,
            token=args.token,
            token_provider=token_reader(args.token_file) if args.token_file else None,
            reconnect=reconnect,
            backoff=Backoff(initial=0.5, maximum=10.0),
            request_timeout=args.timeout,
            open_timeout=args.timeout,
            **tls,
        )
    except ValueError as exc:
        return fail(str(exc), EXIT_USAGE)

    async def main() -> int:
        try:
            await client.connect()
        except (Unauthorized, AgentExists) as exc:
            return fail(f"hub refused agent {agent!r}: {exc}", EXIT_REFUSED)
        except HubRejected as exc:
            return fail(f"hub refused the connection: {exc}", EXIT_CONNECTION)
        try:
            return await body(client, args, out)
        finally:
            await client.close()

    try:
        return asyncio.run(main())
    except BrokenPipeError:
        # The reader of our output went away (`| head`): not an error.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except StreamCancelled as exc:
        return fail(f"stream cancelled: {exc.reason}", EXIT_CONNECTION)
    except ConnectionClosed as exc:
        return fail(f"connection lost: {exc}", EXIT_CONNECTION)
    except (HubConnectionError, RequestTimeout) as exc:
        return fail(exc.message, EXIT_CONNECTION)
    except HubRejected as exc:
        return fail(str(exc), EXIT_REJECTED)
    except HubClientError as exc:
        return fail(str(exc), EXIT_CONNECTION)


def fail(message: str, code: int) -> int:
    """Say what went wrong on stderr; returns ``code``, the exit code."""
    print(f"agora-hub: {message}", file=sys.stderr)
    return code
