"""What a node asks of the operating system before it listens.

**Open files.** Every connection is a file descriptor, and most systems start a
process with a soft limit of 1,024 open files — a hub would refuse its
1,000th agent with ``EMFILE``. The soft limit may be raised by the process
itself up to the hard limit, so a node does that at start
(:func:`raise_open_files_limit`) and logs both figures. When the hard limit
is what caps it (below :data:`WANTED_OPEN_FILES`) it says so with a warning:
only the operator can lift that (systemd ``LimitNOFILE=``, ``ulimit -Hn``,
a container's ``--ulimit nofile=``).

**Listen backlog.** ``listen_backlog`` is how many connections the kernel
completes and queues before the hub accepts them; asyncio's default of 100
overflows when every agent of a node reconnects at once (a dropped SYN is
retried by the client's kernel after 1, 3, 7 s). Linux silently caps the
value at ``net.core.somaxconn``: :func:`effective_backlog` reads it, so the
log shows the backlog the sockets really get.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Open files a node wants: 50,000 agents plus room for Redis, logs and the
#: HTTP port. Below this, the log warns that the limit caps connections.
WANTED_OPEN_FILES = 65536
#: Descriptors a node needs besides its agents' sockets (listeners, Redis,
#: the event loop, files): what the warning takes off the limit.
RESERVED_FILES = 100
#: When the hard limit is "unlimited", the most a process may open (Linux).
_NR_OPEN = Path("/proc/sys/fs/nr_open")
SOMAXCONN = Path("/proc/sys/net/core/somaxconn")


@dataclass(frozen=True, slots=True)
class OpenFiles:
    """The open-file limit before and after :func:`raise_open_files_limit`."""

    before: int
    soft: int
    hard: int

    @property
    def raised(self) -> bool:
        return self.soft > self.before

    @property
    def capped(self) -> bool:
        """The limit is below what a node wants (:data:`WANTED_OPEN_FILES`)."""
        return self.soft < WANTED_OPEN_FILES

    @property
    def connections(self) -> int:
        """About how many agents the limit leaves room for."""
        return max(0, self.soft - RESERVED_FILES)


def raise_open_files_limit(rlimits: Any = resource) -> OpenFiles:
    """Raise the soft RLIMIT_NOFILE to the hard limit; what it is now.

    ``rlimits``: the :mod:`resource` module (a stand-in in tests). A refusal
    (a sandbox, an "unlimited" hard limit the kernel caps lower) leaves the
    soft limit as it was: the node runs with what it has, and says so."""
    soft, hard = rlimits.getrlimit(rlimits.RLIMIT_NOFILE)
    target = hard
    if hard == rlimits.RLIM_INFINITY:
        target = _read_int(_NR_OPEN) or 1_048_576
    if soft != rlimits.RLIM_INFINITY and soft < target:
        try:
            rlimits.setrlimit(rlimits.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    now, hard = rlimits.getrlimit(rlimits.RLIMIT_NOFILE)
    return OpenFiles(before=_finite(soft, rlimits), soft=_finite(now, rlimits), hard=hard)


def log_open_files(limit: OpenFiles, log: Any) -> None:
    """One line with the limit; a warning when it caps connections."""
    log.info("open files limit", soft=limit.soft, hard=limit.hard, raised=limit.raised)
    if limit.capped:
        log.warning(
            f"the open-file limit ({limit.soft}) caps this node near {limit.connections} "
            f"connections; raise the hard limit (systemd LimitNOFILE=, ulimit -Hn) "
            f"to {WANTED_OPEN_FILES} or more for more",
            soft=limit.soft,
            hard=limit.hard,
            connections=limit.connections,
        )


def effective_backlog(requested: int, somaxconn: Path = SOMAXCONN) -> int:
    """The backlog Linux gives a socket asked for ``requested``: at most
    ``net.core.somaxconn`` (elsewhere, or unreadable: ``requested``)."""
    cap = _read_int(somaxconn)
    return requested if cap is None or cap <= 0 else min(requested, cap)


def log_backlog(requested: int, log: Any, somaxconn: Path = SOMAXCONN) -> int:
    """Log the backlog the listeners get; a warning when the kernel caps it."""
    effective = effective_backlog(requested, somaxconn)
    if effective < requested:
        log.warning(
            f"listen_backlog {requested} is capped at {effective} by net.core.somaxconn; "
            f"raise it (sysctl -w net.core.somaxconn={requested}) for reconnect storms",
            requested=requested,
            effective=effective,
        )
    else:
        log.info("listen backlog", backlog=effective)
    return effective


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _finite(value: int, rlimits: Any) -> int:
    return 2**31 - 1 if value == rlimits.RLIM_INFINITY else value
