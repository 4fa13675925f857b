"""What the nodes of a cluster share, each behind small ``typing.Protocol``\\ s
with a memory implementation (one node) and a Redis one (a cluster), both
passing the same contract tests: the backplane (sequenced publish, history,
idempotency keys), presence (agent ids, memberships, the directory, node
liveness), the key-value store, node stats, and the node's reference-counted
subscriptions to the backplane. The Redis implementations all run on the
node's one :class:`~hub.cluster.redis_connection.RedisConnection` (one Redis,
Sentinel or Redis Cluster, from ``redis_url``), which the node closes last.

May import: :mod:`hub.core`, :mod:`hub.config`, :mod:`hub.errors`,
:mod:`protocol`.
"""
