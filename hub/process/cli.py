"""``agora-hub``: the hub and the tools around it.

Subcommands: ``serve`` (run a node), ``keygen`` (an Ed25519 identity), and
client tools for people (``tail``, ``publish``, ``spaces``, ``agents``), each
taking ``--url``. Every ``serve`` flag is also an ``AGORA_HUB_*`` env var.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from hub import __version__
from hub.config.settings import ENV_PREFIX, FILE_ONLY, Settings, load_settings
from hub.errors import ConfigError, HubError


def _add_settings_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", metavar="FILE", help=f"TOML config file [env {ENV_PREFIX}CONFIG]"
    )
    for name, field in Settings.model_fields.items():
        if name in FILE_ONLY:
            continue
        flag = "--" + name.replace("_", "-")
        env = f"{ENV_PREFIX}{name.upper()}"
        default = None if field.default_factory else field.get_default()
        shown = "" if default is None else f" (default {default})"
        help_text = f"{field.description}{shown} [env {env}]".replace("%", "%%")
        if field.annotation is bool:
            parser.add_argument(
                flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            parser.add_argument(flag, dest=name, default=None, metavar=name.upper(), help=help_text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agora-hub", description="Agora Hub: a WebSocket pub/sub hub for AI agents."
    )
    parser.add_argument("--version", action="version", version=f"agora-hub {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    serve = sub.add_parser("serve", help="run a hub node")
    _add_settings_flags(serve)
    serve.set_defaults(func=cmd_serve)

    keygen = sub.add_parser("keygen", help="create an Ed25519 identity (prints its did:key)")
    keygen.add_argument("--out", metavar="FILE", help="write the key here (mode 0600)")
    keygen.add_argument("--force", action="store_true", help="overwrite an existing file")
    keygen.set_defaults(func=cmd_keygen)

    try:
        from agora_client import cli as client_cli
    except ImportError:  # client tools not installed in this build
        client_cli = None
    if client_cli is not None:
        client_cli.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except ConfigError as exc:
        print(f"agora-hub: {exc}", file=sys.stderr)
        return 2
    except HubError as exc:
        print(f"agora-hub: {exc}", file=sys.stderr)
        return 1


# ── serve ───────────────────────────────────────────────────────────────────


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides = {
        name: value
        for name, value in vars(args).items()
        if name in Settings.model_fields and value is not None
    }
    return load_settings(overrides, args.config)


def cmd_serve(args: argparse.Namespace) -> int:
    import signal

    # SIGHUP means "reload" to a running hub; until the handler is installed it
    # waits (blocked) instead of terminating a hub that is still starting.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    settings = settings_from_args(args)
    if settings.workers > 1:
        from hub.process.workers import run_workers

        return run_workers(settings)
    from hub.process.runner import run

    return run(settings)


# ── keygen ──────────────────────────────────────────────────────────────────


def cmd_keygen(args: argparse.Namespace) -> int:
    import orjson
    from nacl.signing import SigningKey

    from hub.config.hub_identity import key_document

    doc = key_document(SigningKey.generate())
    if args.out:
        path = Path(args.out)
        if path.exists() and not args.force:
            print(f"agora-hub: {path} exists (use --force to overwrite)", file=sys.stderr)
            return 1
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.fchmod(fd, 0o600)  # the mode above applies only to a new file
            with os.fdopen(fd, "wb") as fh:
                fh.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        except OSError as exc:
            print(f"agora-hub: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        print(doc["did"])
    else:
        print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
