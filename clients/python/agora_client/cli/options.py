"""The flags every client tool takes, and what they become.

Where the hub is and who to be there may also come from the environment
(``AGORA_HUB_URL``, ``AGORA_HUB_AGENT_ID``, ``AGORA_HUB_TOKEN``,
``AGORA_HUB_TOKEN_FILE``). A token file is read again on every reconnect
and when the hub says the token expired (:func:`token_reader`); a
``wss://`` hub is trusted by ``--ca-file``, else ``SSL_CERT_FILE``, else
the system's CAs (:func:`tls_options`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

DEFAULT_URL = "ws://127.0.0.1:8765/ws"


def common_options() -> argparse.ArgumentParser:
    """The parent parser of every tool: where the hub is and who to be there."""
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
    return common


def add_count(parser: argparse.ArgumentParser) -> None:
    """``-n N``: for the tools that print what arrives until interrupted."""
    parser.add_argument(
        "-n", "--count", type=int, default=None, help="exit after printing N events"
    )


def add_no_reconnect(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-reconnect", action="store_true", help="exit when the connection drops"
    )


def agent_id(args: argparse.Namespace) -> str:
    """``--agent-id``, else ``AGORA_HUB_AGENT_ID``, else a random ``cli-…`` one."""
    return args.agent_id or os.environ.get("AGORA_HUB_AGENT_ID") or f"cli-{secrets.token_hex(4)}"


def throwaway_id(args: argparse.Namespace) -> bool:
    """Whether the tool connects under a random ``cli-…`` id of its own (none was given)."""
    return not (args.agent_id or os.environ.get("AGORA_HUB_AGENT_ID"))


def token_reader(path: str) -> Callable[[], Awaitable[str]]:
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
