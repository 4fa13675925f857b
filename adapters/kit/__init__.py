"""The bridge kit: what every adapter of ``adapters/`` is built from.

- :mod:`~adapters.kit.asking` — ask an agent in a space, wait for its answer,
  and tell it to stop when the caller stops waiting (every inbound face).
- :mod:`~adapters.kit.replies` — answers matched to their request within its
  space and addressees (``Asked``), streamed ones assembled or relayed.
- :mod:`~adapters.kit.joined` — an inbound face's shared member, joined to
  spaces as it needs them.
- :mod:`~adapters.kit.bridge` — an outbound bridge's lifecycle, once: a bridge is its mapping.
- :mod:`~adapters.kit.claim` — an outbound bridge's agent id, held by one node.
- :mod:`~adapters.kit.intake` — the requests addressed to an outbound bridge,
  served by bounded tasks.
- :mod:`~adapters.kit.takeover` — what a lost holder left unanswered, answered.
- :mod:`~adapters.kit.stored` — the keys and records adapters keep in the
  key-value store.
- :mod:`~adapters.kit.shares` — each caller's share of a node's bounds.

It imports :mod:`hub.adapter_host`, :mod:`protocol` and :mod:`adapters` (its
root exception) only; the adapter packages import it, never the reverse.
"""
