"""Authorization: the one policy deciding what an identity may do in a space.

Every face — WebSocket sessions, the HTTP gateways (MCP, A2A, HTTP Agora,
signed envelopes), the server API — asks :class:`SpacePolicy` the same
question, ``refusal(who, act, space)``: may ``who`` (anything with an
``agent_id`` and a :class:`Grant`, a :class:`Principal`) ``act`` (:class:`Act`:
read or publish) in ``space``? None of them reads claims or rules its own way.

Three things decide, in this order:

* a **system space** (``agent.``, ``file.``, ``mcp.``) is read-only for
  everyone, the hub's own agents and the operator included;
* the identity's :class:`Grant`, from its credentials: the JWT claims
  ``join`` / ``publish`` or the same fields of a tokens-file entry (or of a
  ``[[signers]]`` entry) — glob patterns over **space names**; absent
  (``None``) means unrestricted. A *trusted* grant (the hub's own virtual
  members, the operator's server API) is not restricted by claims or rules;
* the rules of a declared space, ``allow_join`` / ``allow_publish`` — glob
  patterns over **agent ids**; absent means anyone.

Reading (:attr:`Act.READ`) covers joining, observing, reading members and
history, and *discovery*: seeing the space or its members in any listing
(``spaces_list``, ``agent.list``, A2A cards, HELLO, ``/wellknown``).
Publishing (:attr:`Act.PUBLISH`) covers publishing, streaming, asking and
calling a tool offered in the space — a member's act: whoever may not read
(join) a space may not publish there either, on any face (a gateway
publishes for callers who are not members, so this cannot be left to the
membership a WebSocket needs).

Patterns follow :func:`fnmatch.fnmatchcase`: case-sensitive, ``*`` matches any
run of characters *including dots* (``task.*`` matches ``task.a.b``), ``?``
one character, ``[abc]`` / ``[!abc]`` a set. An empty list allows nothing.

Checks run on every publish, so patterns are compiled once and
:meth:`SpacePolicy.restricts` tells a session once per grant whether any
check but the system-space one can refuse it at all.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Protocol

from protocol.names import is_system_space

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
    credentials that do not expire. ``trusted``: the hub's own agents and the
    operator (:attr:`Grant.hub`), whom neither claims nor space rules restrict.
    """

    join: tuple[str, ...] | None = None
    publish: tuple[str, ...] | None = None
    expires_at: float | None = None
    trusted: bool = False
    _join: Globs | None = field(init=False, repr=False, compare=False)
    _publish: Globs | None = field(init=False, repr=False, compare=False)

    unrestricted: ClassVar[Grant]
    hub: ClassVar[Grant]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_join", None if self.join is None else Globs(self.join))
        object.__setattr__(self, "_publish", None if self.publish is None else Globs(self.publish))


Grant.unrestricted = Grant()
Grant.hub = Grant(trusted=True)


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


class Act(StrEnum):
    """What an identity does in a space."""

    #: Join, observe, read members or history, see the space or its members listed.
    READ = "read"
    #: Publish, stream, ask, call a tool offered there.
    PUBLISH = "publish"


class Refusal(StrEnum):
    """Why the policy says no (for the face to word; never shown with the rule)."""

    SYSTEM_SPACE = "system space"
    CLAIMS = "claims"
    SPACE_RULES = "space rules"


class Principal(Protocol):
    """Who acts: a session, an HTTP gateway's caller, a mapped envelope signer."""

    @property
    def agent_id(self) -> str: ...

    @property
    def grant(self) -> Grant: ...


def _refused(
    claims: Globs | None, allowed: Globs | None, space: str, who: Principal
) -> Refusal | None:
    if claims is not None and not claims.matches(space):
        return Refusal.CLAIMS
    if allowed is not None and not allowed.matches(who.agent_id):
        return Refusal.SPACE_RULES
    return None


class SpacePolicy:
    """The one answer to "may ``who`` ``act`` in ``space``?" for every face.

    Built once from the declared spaces (:meth:`of`) and handed to every
    face; immutable, so a reload builds a new one.
    """

    __slots__ = ("_rules",)

    def __init__(self, rules: Mapping[str, SpaceRules] | None = None):
        self._rules: Mapping[str, SpaceRules] = dict(rules or {})

    @classmethod
    def of(cls, spaces: Iterable[DeclaresRules]) -> SpacePolicy:
        return cls(space_rules(spaces))

    def restricts(self, grant: Grant) -> bool:
        """Whether claims or rules can refuse ``grant``'s holder anything; when
        not, only publishing to a system space is refused."""
        if grant.trusted:
            return False
        return grant.join is not None or grant.publish is not None or bool(self._rules)

    def refusal(self, who: Principal, act: Act, space: str) -> Refusal | None:
        """Why ``who`` may not ``act`` in ``space``; None when it may."""
        if act is Act.PUBLISH and is_system_space(space):
            return Refusal.SYSTEM_SPACE
        grant = who.grant
        if grant.trusted:
            return None
        rule = self._rules.get(space)
        refusal = _refused(grant._join, None if rule is None else rule.allow_join, space, who)
        if refusal is not None or act is Act.READ:
            return refusal
        return _refused(grant._publish, None if rule is None else rule.allow_publish, space, who)

    def allows(self, who: Principal, act: Act, space: str) -> bool:
        return self.refusal(who, act, space) is None

    def may_read(self, who: Principal, space: str) -> bool:
        return self.refusal(who, Act.READ, space) is None

    def may_publish(self, who: Principal, space: str) -> bool:
        return self.refusal(who, Act.PUBLISH, space) is None

    def may_read_spaceless(self, who: Principal) -> bool:
        """May ``who`` see what concerns no space in particular (another
        caller's discovery on ``mcp.calls``)? Not when its credentials keep it
        to some spaces (``join`` claims); space rules do not, they name spaces."""
        grant = who.grant
        return grant.trusted or grant.join is None

    def readable(self, who: Principal, spaces: Iterable[str]) -> list[str]:
        """Those of ``spaces`` ``who`` may read, in order (discovery)."""
        return [space for space in spaces if self.refusal(who, Act.READ, space) is None]

    def ruled_out(self, who: Principal) -> list[str]:
        """The declared spaces whose ``allow_join`` keeps ``who`` out (none for
        a trusted grant): what discovery must hide from it whatever its claims."""
        if who.grant.trusted:
            return []
        return [
            space
            for space, rule in self._rules.items()
            if rule.allow_join is not None and not rule.allow_join.matches(who.agent_id)
        ]
