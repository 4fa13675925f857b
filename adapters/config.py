"""The ``[bridges]`` tables of the config file, checked by the adapters that own them.

The hub's settings keep ``[[bridges.KIND]]`` tables as they were written; each
adapter package declares the model of its own kind (``config.py``) and
:func:`parse_bridges` checks every table against it before the hub serves,
so a mistake stops the hub at start with the table named and, for a
mistyped key or kind, the closest real one suggested.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from hub.adapter_host import ConfigError

Model = TypeVar("Model", bound=BaseModel)


class BridgeConfig(BaseModel):
    """What every outbound bridge table has: the space it joins, the agent id
    it joins as, and the remote's URL (the only place targets come from)."""

    model_config = {"extra": "forbid"}

    space: str
    agent_id: str
    url: str


def parse_bridges(
    raw: Mapping[str, Any], kinds: Mapping[str, type[BaseModel]]
) -> dict[str, list[BaseModel]]:
    """Every table of ``raw`` (``settings.bridges``) as its kind's model;
    :class:`ConfigError` listing every mistake."""
    parsed: dict[str, list[BaseModel]] = {kind: [] for kind in kinds}
    problems: list[str] = []
    for kind, tables in raw.items():
        model = kinds.get(kind)
        if model is None:
            problems.append(f"bridges.{kind}: unknown setting{_hint(kind, kinds)}")
            continue
        if not isinstance(tables, list):
            problems.append(f"bridges.{kind}: must be a list of tables ([[bridges.{kind}]])")
            continue
        for n, table in enumerate(tables):
            try:
                parsed[kind].append(model.model_validate(table))
            except ValidationError as exc:
                problems.extend(_describe(exc, f"bridges.{kind}.{n}", model))
    if problems:
        raise ConfigError("invalid settings: " + "; ".join(problems))
    return parsed


def of_kind(parsed: Mapping[str, list[BaseModel]], kind: str, model: type[Model]) -> list[Model]:
    """The tables of one kind, typed."""
    return [table for table in parsed.get(kind, ()) if isinstance(table, model)]


def _describe(exc: ValidationError, where: str, model: type[BaseModel]) -> list[str]:
    lines = []
    for err in exc.errors(include_url=False):
        loc = ".".join([where, *(str(p) for p in err["loc"])])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown setting" + _hint(str(err["loc"][-1]), model.model_fields)
        lines.append(f"{loc}: {msg}")
    return lines


def _hint(name: str, candidates: Iterable[str]) -> str:
    found = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {found[0]}?" if found else ""
