"""What a session's actions do: the dispatcher and one handler per concern.

:class:`~hub.handlers.dispatch.Dispatcher` runs each action a session returns
with the handler registered for it and turns failures into ``error`` events:
publishing (with the signed-envelope check and idempotency keys), membership
(joins, leaves, registration, listings, announcements), recovery (the exact
boundary of a join, replay after ``since``, history reads), gap filling after
a backplane outage, agent ids (claims, liveness probes, eviction) and token
expiry. Each gets the registry, the cluster stores and an error sender —
never the node.

May import: :mod:`hub.core`, :mod:`hub.config`, :mod:`hub.cluster`,
:mod:`hub.auth`, :mod:`hub.errors`, :mod:`protocol`.
"""
