"""SIGHUP: re-read the tokens file, the TLS certificate and the log level.

All or nothing: every part is read and checked first — the settings (config
file and environment, for ``log_level``), the tokens file, the certificate
and key — and only when all of them are usable are they put in service
together. A failure changes nothing and logs one ``reload failed`` line that
says which file is wrong. Open connections are never touched: an agent keeps
the grant it authenticated with and its TLS session; new handshakes get the
new tokens and certificate.

Other settings changed in the config file take effect only on restart; a
reload names them in a warning so an operator is not left guessing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from hub.config.settings import RELOADABLE, Settings, reread_settings
from hub.errors import ConfigError
from hub.ops.logging import set_log_level

if TYPE_CHECKING:
    from hub.process.server import HubServer

# Settings a --workers child gets from its parent rather than from the file.
_PER_PROCESS = {"node_id", "workers"}


@runtime_checkable
class Reloadable(Protocol):
    def prepare_reload(self) -> Callable[[], None]:
        """Read and check; return what puts the result in service. ConfigError: unusable."""
        ...


def reload_hub(server: HubServer, log: Any) -> bool:
    """Reload what can be reloaded while serving; False (and nothing changed) on failure."""
    node = server.node
    reloaded: dict[str, Any] = {}
    commits: list[Callable[[], None]] = []
    try:
        fresh = reread_settings(node.settings)
        if isinstance(node.auth, Reloadable):
            commits.append(node.auth.prepare_reload())
            reloaded["tokens_file"] = str(getattr(node.auth, "path", ""))
        if server.tls is not None:
            commits.append(server.tls.prepare_reload())
            reloaded["tls_certfile"] = str(server.tls.certfile)
    except ConfigError as exc:
        log.error("reload failed; nothing changed", error=str(exc))
        return False
    except Exception as exc:  # never let a reload take the hub down
        log.error("reload failed; nothing changed", error=f"{type(exc).__name__}: {exc}")
        return False
    for commit in commits:
        commit()
    if fresh is None:
        log.info("reloaded", **reloaded)
        return True
    stale = restart_needed(node.settings, fresh)
    if stale:
        log.warning("settings changed that take effect only on restart", settings=stale)
    reloaded["log_level"] = fresh.log_level
    # "reloaded" is logged under the more verbose of the two levels, so it shows
    # whichever way the level moved.
    if fresh.log_level in ("debug", "info"):
        set_log_level(fresh.log_level)
        log.info("reloaded", **reloaded)
    else:
        log.info("reloaded", **reloaded)
        set_log_level(fresh.log_level)
    return True


def restart_needed(running: Settings, fresh: Settings) -> list[str]:
    """Names of settings whose new value a reload does not apply."""
    return [
        name
        for name in Settings.model_fields
        if name not in RELOADABLE
        and name not in _PER_PROCESS
        and getattr(running, name) != getattr(fresh, name)
    ]
