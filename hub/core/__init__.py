"""The hub's state, without I/O: what one connection may do, and who gets what.

A connection's protocol state machine (:mod:`~hub.core.session`, which turns
a decoded frame into :mod:`~hub.core.actions`), its rate limit, its open
streams and the space permissions it holds; the node's local members and the
one fan-out loop (:mod:`~hub.core.registry`), the audiences of relayed
streams, frames encoded once, the space directory's rules, identifiers, the
hot path's counters. Tested with literal frames and fake members.

May import: :mod:`protocol`, :mod:`hub.errors` and itself — no sockets, no
Redis, no clock but the one it is given.
"""
