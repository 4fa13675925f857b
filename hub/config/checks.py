"""What is wrong with a configuration, said so an operator can fix it.

Pure helpers for :mod:`hub.config.settings` and :mod:`hub.net.tls`: the closest real name
to a mistyped key or environment variable (``difflib``), a file setting
that cannot be read, named with its path and what it is for, and address
lists (``trusted_proxies``).
"""

from __future__ import annotations

import difflib
import ipaddress
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from hub.errors import ConfigError

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Files the settings name, and what each is for (said when one is missing).
FILES = {
    "tls_certfile": "the TLS certificate chain (PEM) served on both ports",
    "tls_keyfile": "the TLS private key (PEM) for tls_certfile",
    "auth_tokens_file": "the agents' tokens for auth_mode=tokens",
    "identity_file": "the hub's Ed25519 identity key (agora-hub keygen --out FILE)",
}


def check_file(path: Path | None, setting: str, purpose: str) -> None:
    """ConfigError naming the setting, the path and what the file is for when
    ``path`` is set but cannot be read."""
    if path is None:
        return
    if not path.exists():
        problem = "no such file"
    elif not path.is_file():
        problem = "not a file"
    elif not os.access(path, os.R_OK):
        problem = "not readable by this user"
    else:
        return
    raise ConfigError(f"{setting} {path}: {problem}; it should hold {purpose}")


def closest(name: str, candidates: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_env_vars(environ: Mapping[str, str], names: Iterable[str], prefix: str) -> list[str]:
    """One warning per ``<prefix>*`` variable that is none of ``names``, with the
    closest one's variable when there is one. Names compare case-insensitively,
    as pydantic-settings reads them."""
    known = list(names)
    warnings = []
    for var in sorted(environ):
        upper = var.upper()
        name = upper.removeprefix(prefix).lower()
        if not upper.startswith(prefix) or name in known:
            continue
        close = closest(name, known)
        hint = f"; did you mean {prefix}{close.upper()}?" if close else ""
        warnings.append(f"unknown environment variable {var} is ignored{hint}")
    return warnings


def closest_field(root: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """The field nearest to the unknown key at ``loc`` (a validation error's
    location), among the fields of the model it is in — nested models too."""
    model: type[BaseModel] | None = root
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue  # a list index: the same model
        field = model.model_fields.get(part)
        model = _model_of(field.annotation) if field is not None else None
    return None if model is None else closest(str(loc[-1]), model.model_fields)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model in ``X``, ``list[X]`` or ``X | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def parse_networks(values: Iterable[str]) -> list[IPNetwork]:
    """``["10.0.0.0/8", "127.0.0.1", "::1"]`` → networks; ValueError names a bad entry."""
    networks = []
    for value in values:
        text = value.strip()
        if not text:
            continue
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(
                f"{text!r} is not an IP address or CIDR network (e.g. 10.0.0.0/8)"
            ) from None
    return networks
