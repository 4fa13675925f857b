"""The node: the composition root and what only it does.

:class:`~hub.node.node.Node` builds every part, hands each only what it uses,
is the backplane's delivery handler and starts and closes the whole in order.
Besides it: one WebSocket connection's lifecycle, the periodic sweep, the
cluster link between nodes, and hosting adapters — their virtual members and
the :class:`~hub.adapter_host.AdapterHost` they get (:mod:`~hub.node.hosting`).

May import everything of ``hub`` below it (core, config, net, cluster,
auth, handlers, ops) and :mod:`hub.adapter_host`; nothing imports it but
:mod:`hub.process` and the adapters' host face.
"""
