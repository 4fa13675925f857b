"""The forms ``redis_url`` takes: one Redis, Sentinel, or Redis Cluster.

::

    redis://[[user]:password@]host[:port][/db]          one Redis (redis-py's own URL form,
    rediss://…   unix://…                               with its query options)
    redis+sentinel://[[user]:password@]host[:port][,host[:port]…]/MASTER[/db][?options]
    redis+cluster://[[user]:password@]host[:port][,host[:port]…][?options]
    rediss+sentinel://…   rediss+cluster://…            the same over TLS

With Sentinel the hosts are the sentinels (default port 26379) and ``MASTER``
the name they monitor; the user and password are the data nodes' (the
master's and its replicas'), ``sentinel_username`` / ``sentinel_password``
those of the sentinels (default: none). With Cluster the hosts are any of
the cluster's nodes (default port 6379), from which the rest is discovered.
Options of both: ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``,
``ssl_cert_reqs`` (``none`` | ``optional`` | ``required``), each for ``rediss+``
only; any other option is refused, so a typo is not silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlsplit

Mode = Literal["single", "sentinel", "cluster"]

_SCHEMES: dict[str, tuple[Mode, bool]] = {
    "redis": ("single", False),
    "rediss": ("single", True),
    "unix": ("single", False),
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
}
_DEFAULT_PORT = {"sentinel": 26379, "cluster": 6379}
_TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")
_SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")


@dataclass(frozen=True)
class RedisTarget:
    """What a ``redis_url`` names. ``url`` is the original (a single Redis is
    opened from it by redis-py itself)."""

    url: str
    mode: Mode
    tls: bool = False
    hosts: tuple[tuple[str, int], ...] = ()
    master: str = ""  # Sentinel: the monitored master's name
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    tls_options: dict[str, str] = field(default_factory=dict)


def parse_redis_url(url: str) -> RedisTarget:
    """The target of ``url``; ``ValueError`` saying what is wrong with it."""
    scheme, sep, _ = url.partition("://")
    if not sep or scheme.lower() not in _SCHEMES:
        forms = ", ".join(f"{s}://" for s in _SCHEMES)
        raise ValueError(f"redis_url must start with one of {forms} (or be memory://)")
    mode, tls = _SCHEMES[scheme.lower()]
    if mode == "single":
        if scheme.lower() != "unix":
            _check_single(url)
        return RedisTarget(url, mode, tls)
    parts = urlsplit("x://" + url.partition("://")[2])
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    username = password = None
    if userinfo:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    if not hostlist:
        raise ValueError(f"redis_url: {scheme}:// needs at least one host:port")
    entries = hostlist.split(",")
    if "" in entries:
        raise ValueError(f"redis_url: an empty entry in the host list {hostlist!r}")
    hosts = tuple(_host(h, _DEFAULT_PORT[mode]) for h in entries)
    path = [unquote(p) for p in parts.path.split("/") if p]
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    allowed = _TLS_OPTIONS + (_SENTINEL_OPTIONS if mode == "sentinel" else ())
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"redis_url: unknown option(s) {unknown}; allowed: {list(allowed)}")
    tls_options = {k: v for k, v in options.items() if k in _TLS_OPTIONS}
    if tls_options and not tls:
        raise ValueError(f"redis_url: {sorted(tls_options)} need the rediss+{mode}:// scheme")
    if tls_options.get("ssl_cert_reqs", "required") not in ("none", "optional", "required"):
        raise ValueError("redis_url: ssl_cert_reqs must be none, optional or required")
    master = ""
    db = 0
    if mode == "sentinel":
        if not path:
            raise ValueError("redis_url: redis+sentinel:// needs the master's name: …/MASTER")
        master, *rest = path
        if len(rest) > 1:
            raise ValueError("redis_url: redis+sentinel://hosts/MASTER[/db], nothing more")
        db = _db(rest[0]) if rest else 0
    elif path:
        raise ValueError("redis_url: redis+cluster:// takes no path (a cluster has one db)")
    return RedisTarget(
        url,
        mode,
        tls,
        hosts,
        master,
        db,
        username,
        password,
        options.get("sentinel_username") or None,
        options.get("sentinel_password") or None,
        tls_options,
    )


def _check_single(url: str) -> None:
    """What redis-py would fail on only when connecting (a port that is not
    one: a traceback) or ignore (a db that is not a number: db 0 instead)."""
    parts = urlsplit(url)
    hostport = parts.netloc.rpartition("@")[2]
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 and hostport.rpartition("]")[2].count(":"):
        raise ValueError(f"redis_url: {hostport!r} has no valid port")
    db = unquote(parts.path).strip("/")
    if db:
        _db(db)


def _host(text: str, default_port: int) -> tuple[str, int]:
    if text.startswith("["):  # [ipv6]:port
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = text.rpartition(":") if ":" in text else (text, "", "")
    if not host:
        raise ValueError(f"redis_url: {text!r} is not host:port")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"redis_url: {text!r} has no valid port")
    return host, int(port_text)


def _db(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"redis_url: the db must be a number, not {text!r}")
    db = int(text)
    if db > _MAX_DB:
        raise ValueError(f"redis_url: the db must be from 0 to {_MAX_DB}, not {text!r}")
    return db


#: The largest db index a Redis can be configured with (``databases`` is an int).
_MAX_DB = 2**31 - 1
