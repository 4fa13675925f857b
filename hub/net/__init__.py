"""Sockets: the pieces between the network and the node.

A WebSocket connection that is a :class:`~hub.core.peer.Peer`
(:mod:`~hub.net.connection`) with its bounded outbox and the flusher that
writes every dirty one once per loop iteration, the handshake's checks
(credentials, origins, per-IP bounds), client addresses behind trusted
proxies, TLS, the HTTP port's server and bounded body reads.

May import: :mod:`hub.core`, :mod:`hub.config`, :mod:`hub.errors`,
:mod:`protocol`.
"""
