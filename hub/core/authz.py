"""Authorization: which spaces an authenticated agent may join and publish to.

Two independent restrictions apply, and both must allow an action:

* the connection's :class:`Grant`, from its credentials: the JWT claims
  ``join`` / ``publish`` or the same fields of a tokens-file entry — glob
  patterns over **space names**; absent (``None``) means unrestricted;
* the rules of a declared space, ``allow_join`` / ``allow_publish`` — glob
  patterns over **agent ids**; absent means anyone.

Patterns follow :func:`fnmatch.fnmatchcase`: case-sensitive, ``*`` matches any
run of characters *including dots* (``task.*`` matches ``task.a.b``), ``?``
one character, ``[abc]`` / ``[!abc]`` a set. An empty list allows nothing.

Reading a space (``space.members`` and ``space.history`` requests) is checked
with :func:`may_join`; opening a stream and an addressed publish with
:func:`may_publish`. These functions run on every publish, so patterns are
compiled once and the common unrestricted case returns after two checks.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

# Bounds on one pattern list, so a token or config entry can't make every
# publish pay for thousands of alternatives.
MAX_PATTERNS = 100
MAX_PATTERN_LENGTH = 256


def parse_patterns(value: object, what: str) -> tuple[str, ...]:
    """Check a list of glob patterns (from a claim, a file or a setting).

    Raises ValueError naming ``what`` (never echoing the value itself).
    """
    if not isinstance(value, list | tuple) or not all(isinstance(p, str) for p in value):
        raise ValueError(f"{what} must be a list of strings")
    if len(value) > MAX_PATTERNS:
        raise ValueError(f"{what} has more than {MAX_PATTERNS} patterns")
    for pattern in value:
        if not 1 <= len(pattern) <= MAX_PATTERN_LENGTH:
            raise ValueError(f"{what}: each pattern must be 1–{MAX_PATTERN_LENGTH} characters")
    return tuple(value)


class Globs:
    """A compiled list of glob patterns; matches when any one pattern does."""

    __slots__ = ("_match", "patterns")

    def __init__(self, patterns: Iterable[str]):
        self.patterns = tuple(patterns)
        # One alternation of fnmatch's own translations: same semantics as
        # fnmatchcase, one regex call per check whatever the list length.
        regex = "|".join(fnmatch.translate(p) for p in self.patterns)
        self._match = re.compile(regex).match if self.patterns else None

    def matches(self, name: str) -> bool:
        return self._match is not None and self._match(name) is not None

    def __repr__(self) -> str:
        return f"Globs({list(self.patterns)!r})"


@dataclass(frozen=True, slots=True)
class Grant:
    """What a connection's credentials allow; ``None`` = unrestricted.

    ``expires_at`` is the JWT ``exp`` (Unix epoch seconds), ``None`` for
    credentials that do not expire.
    """

    join: tuple[str, ...] | None = None
    publish: tuple[str, ...] | None = None
    expires_at: float | None = None
    _join: Globs | None = field(init=False, repr=False, compare=False)
    _publish: Globs | None = field(init=False, repr=False, compare=False)

    unrestricted: ClassVar[Grant]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_join", None if self.join is None else Globs(self.join))
        object.__setattr__(self, "_publish", None if self.publish is None else Globs(self.publish))


Grant.unrestricted = Grant()


@dataclass(frozen=True, slots=True)
class SpaceRules:
    """A declared space's agent-id rules; ``None`` = anyone."""

    allow_join: Globs | None = None
    allow_publish: Globs | None = None


class DeclaresRules(Protocol):
    """What :func:`space_rules` reads from a declared space."""

    id: str
    allow_join: list[str] | None
    allow_publish: list[str] | None


def space_rules(spaces: Iterable[DeclaresRules]) -> dict[str, SpaceRules]:
    """Compile the rules of declared spaces; spaces without rules are left out.

    Build it once (at start or on config reload) and pass it to every check.
    """
    rules: dict[str, SpaceRules] = {}
    for space in spaces:
        if space.allow_join is None and space.allow_publish is None:
            continue
        rules[space.id] = SpaceRules(
            allow_join=None if space.allow_join is None else Globs(space.allow_join),
            allow_publish=None if space.allow_publish is None else Globs(space.allow_publish),
        )
    return rules


def may_join(grant: Grant, space: str, agent_id: str, rules: Mapping[str, SpaceRules]) -> bool:
    """May ``agent_id``, holding ``grant``, join (or read) ``space``?"""
    if grant._join is None and not rules:
        return True
    if grant._join is not None and not grant._join.matches(space):
        return False
    rule = rules.get(space)
    return rule is None or rule.allow_join is None or rule.allow_join.matches(agent_id)


def may_publish(grant: Grant, space: str, agent_id: str, rules: Mapping[str, SpaceRules]) -> bool:
    """May ``agent_id``, holding ``grant``, publish (or stream) to ``space``?"""
    if grant._publish is None and not rules:
        return True
    if grant._publish is not None and not grant._publish.matches(space):
        return False
    rule = rules.get(space)
    return rule is None or rule.allow_publish is None or rule.allow_publish.matches(agent_id)
