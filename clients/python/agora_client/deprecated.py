"""Old names, kept for one release with a :class:`DeprecationWarning`.

The two SDKs give a name one meaning (contract §19): ``members()`` is the paged
call, ``known_members()`` the list the client has cached, ``close()`` closes.
This release renamed the Python names that meant something else; each old one
still works and says what to use instead:

=============================  ==========================================
old                            now
=============================  ==========================================
``c.space_members(space, …)``  ``await c.members(space, …)``
``c.members(space)`` as a list ``c.known_members(space)``
=============================  ==========================================

``c.members(space)`` cannot be both at once, so it returns a
:class:`MembersCall`: awaited it is the paged call; used the old way — iterated,
``len()``, ``in``, indexed, compared, tested for truth — it warns and answers the
cached list. (One old use it cannot keep: ``c.members(space) is None`` for a
space not joined; ``not c.members(space)`` still works.) ``aclose()`` is no
deprecated name: it stays beside ``close()``, the name ``contextlib.aclosing``
calls.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Coroutine, Generator, Iterator
from typing import Any

from agora_client.models import MembersPage


def renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``new``."""
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release: use {new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


class MembersCall:
    """What ``Client.members(space)`` returns: awaited, one page of the space's
    members (a request to the hub); used as a list, the cached list of old,
    with a :class:`DeprecationWarning`."""

    __slots__ = ("_fetch", "_known", "_space")

    def __init__(
        self,
        space: str,
        fetch: Callable[[], Coroutine[Any, Any, MembersPage]],
        known: Callable[[], list[str] | None],
    ):
        self._space = space
        self._fetch = fetch
        self._known = known

    def __await__(self) -> Generator[Any, None, MembersPage]:
        return self._fetch().__await__()

    def _cached(self) -> list[str]:
        renamed(
            f"members({self._space!r}) used as a list",
            f"known_members({self._space!r}) for the cached list "
            "(members() is now the paged request: await it)",
            stacklevel=4,
        )
        return self._known() or []

    def __iter__(self) -> Iterator[str]:
        return iter(self._cached())

    def __len__(self) -> int:
        return len(self._cached())

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._cached()

    def __getitem__(self, index: Any) -> Any:
        return self._cached()[index]

    def __bool__(self) -> bool:
        return bool(self._cached())

    def __eq__(self, other: object) -> bool:
        return self._cached() == other

    __hash__ = None  # type: ignore[assignment]  # compared like a list: not hashable

    def __repr__(self) -> str:
        return f"<members({self._space!r}): await it for a page of the hub's member list>"
