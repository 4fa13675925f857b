"""The client's address behind reverse proxies: ``X-Forwarded-For`` and ``Forwarded``.

A proxy in front of the hub makes every TCP connection come from the proxy.
Proxies say who their client was in a header; the hub believes it only when
the TCP peer is one of ``trusted_proxies`` (addresses or CIDR networks), and
never from anyone else — otherwise any client could claim any address.

:meth:`TrustedProxies.client_address` is the one place that decides a
request's client address; the WebSocket handshake (``HubServer.client_address``)
and anything that limits or logs per client (per-IP connection limits) go
through it. The rule, as nginx's ``real_ip_recursive`` and most frameworks
apply it:

* The peer is not trusted (or nothing is): the peer is the client.
* Otherwise the hops of ``X-Forwarded-For`` (every such header, in order,
  comma-separated) — or, when the request has none, the ``for=`` parameters of
  RFC 7239 ``Forwarded`` — are read from the right, the end the nearest proxy
  appended to. Each hop a trusted proxy vouches for is believed; the first
  hop that is not itself a trusted proxy is the client. Hops further left were
  written by the client or by proxies nobody trusts, and are ignored.
* A hop that is not an IP address (``unknown``, an obfuscated ``_name``,
  garbage) ends the walk: the client is then the last address that was
  vouched for, so a client can never make the hub log or count a string of
  its choosing.

Both headers at once: ``X-Forwarded-For`` wins, because that is what the
proxies in ``deploy/`` (and most balancers) set. A proxy that sets only
``Forwarded`` must remove a client's ``X-Forwarded-For`` (docs/operations.md).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hub.config.checks import IPNetwork, parse_networks

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Longest header value looked at; a proxy chain is a handful of hops.
_MAX_HEADER = 4096
#: A host (name or address) and optional port, as a forwarded Host may say it.
_HOST = re.compile(r"(?:[a-z0-9.-]{1,253}|\[[0-9a-f:.]{2,45}\])(?::[0-9]{1,5})?")


@dataclass(frozen=True, slots=True)
class ClientAddress:
    """Who is at the other end: ``ip`` is what per-client limits key on."""

    ip: str
    #: The TCP port, when the client is the TCP peer (proxies do not pass it on).
    port: int | None = None
    #: ``host:port`` of the trusted proxy the request came through, if any.
    via: str | None = None

    def __str__(self) -> str:
        if self.port is None:
            return self.ip
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"{host}:{self.port}"


class TrustedProxies:
    """Which TCP peers may say who their client is."""

    def __init__(self, networks: Iterable[str] = ()):
        self.networks: tuple[IPNetwork, ...] = tuple(parse_networks(networks))

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, address: IPAddress) -> bool:
        return any(address in network for network in self.networks)

    def client_address(
        self, peer: tuple[Any, ...] | None, headers: Mapping[str, str] | Any
    ) -> ClientAddress:
        """The client of a request that arrived from TCP ``peer`` with ``headers``.

        ``peer`` is the socket's remote address (``(host, port, …)``);
        ``headers`` a websockets ``Headers`` or an aiohttp ``CIMultiDictProxy``.
        """
        host, port = (str(peer[0]), int(peer[1])) if peer else ("unknown", None)
        if not self.networks and host.count(".") == 3 and ":" not in host:
            # No proxy to believe and an IPv4 peer as the socket reports it:
            # already in canonical form, nothing to parse (once per handshake).
            return ClientAddress(host, port)
        peer_ip = _ip(host)
        if peer_ip is None:
            return ClientAddress(host, port)
        direct = ClientAddress(str(peer_ip), port)
        if not self.networks or not self.trusts(peer_ip):
            return direct
        hops = _forwarded_for(headers)
        if not hops:
            return direct
        client: IPAddress | None = None
        for hop in reversed(hops):
            address = _ip(hop)
            if address is None:
                break
            client = address
            if not self.trusts(address):
                break
        if client is None:
            return direct
        return ClientAddress(str(client), None, via=str(direct))

    def origin(
        self, peer: tuple[Any, ...] | None, headers: Mapping[str, str] | Any, scheme: str, host: str
    ) -> str:
        """``scheme://host`` as the client reached this request: what a trusted
        proxy says in ``X-Forwarded-Proto`` / ``X-Forwarded-Host`` (else in
        ``Forwarded``'s ``proto=`` / ``host=``), otherwise the request's own.
        The nearest proxy's value (the last one) is taken."""
        if not self.networks:  # no proxy to believe: nothing to parse
            return f"{scheme}://{host}"
        peer_ip = _ip(str(peer[0])) if peer else None
        if peer_ip is not None and self.trusts(peer_ip):
            proto = _last(_header_values(headers, "X-Forwarded-Proto"))
            forwarded_host = _last(_header_values(headers, "X-Forwarded-Host"))
            if proto is None and forwarded_host is None:
                proto, forwarded_host = _rfc7239_origin(_header_values(headers, "Forwarded"))
            if proto in ("http", "https"):
                scheme = proto
            if forwarded_host and _HOST.fullmatch(forwarded_host):
                host = forwarded_host
        return f"{scheme}://{host}"


def _header_values(headers: Any, name: str) -> list[str]:
    getter = getattr(headers, "get_all", None) or getattr(headers, "getall", None)
    if getter is None:
        value = headers.get(name)
        return [] if value is None else [value]
    try:
        return list(getter(name))
    except KeyError:  # aiohttp's getall without a default
        return []


def _forwarded_for(headers: Any) -> list[str]:
    """The hops, oldest first: X-Forwarded-For when present, else Forwarded's for=."""
    xff = _header_values(headers, "X-Forwarded-For")
    if xff:
        return [hop.strip() for hop in _tail(",".join(xff)).split(",")]
    forwarded = _header_values(headers, "Forwarded")
    if forwarded:
        return _rfc7239_for(_tail(",".join(forwarded)))
    return []


def _last(values: list[str]) -> str | None:
    """The last comma-separated value of a header (what the nearest proxy set)."""
    text = ",".join(values)[-_MAX_HEADER:]
    last = text.rpartition(",")[2].strip().lower()
    return last or None


def _rfc7239_origin(values: list[str]) -> tuple[str | None, str | None]:
    """``proto=`` and ``host=`` of the last element of a ``Forwarded`` header."""
    elements = _split_outside_quotes(",".join(values)[-_MAX_HEADER:], ",")
    proto = host = None
    for pair in _split_outside_quotes(elements[-1], ";") if elements else ():
        key, sep, value = pair.partition("=")
        key, value = key.strip().lower(), value.strip().strip('"')
        if sep and key == "proto":
            proto = value.lower()
        elif sep and key == "host":
            host = value.lower()
    return proto, host


def _tail(text: str) -> str:
    """At most the last ``_MAX_HEADER`` characters, in whole hops: the right end
    is what the trusted proxies wrote."""
    if len(text) <= _MAX_HEADER:
        return text
    return text[-_MAX_HEADER:].partition(",")[2]


def _rfc7239_for(text: str) -> list[str]:
    """The ``for=`` node of each element of a ``Forwarded`` header (RFC 7239 §4)."""
    hops = []
    for element in _split_outside_quotes(text, ","):
        node = "unknown"  # an element without for= says nothing we may believe
        for pair in _split_outside_quotes(element, ";"):
            key, sep, value = pair.partition("=")
            if sep and key.strip().lower() == "for":
                node = value.strip().strip('"')
        hops.append(node)
    return hops


def _split_outside_quotes(text: str, separator: str) -> list[str]:
    parts, current, quoted = [], [], False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == separator and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _ip(text: str) -> IPAddress | None:
    """An address from ``1.2.3.4``, ``1.2.3.4:80``, ``::1``, ``[::1]`` or ``[::1]:80``."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # IPv4 with a port
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # a dual-stack socket's view of an IPv4 peer
    return address
