"""The garbage collector of a node: freeze what lives as long as the process.

CPython's cycle collector walks every tracked container of the generations
it collects. After start a node holds some hundred thousand long-lived ones
— modules, classes, pydantic validators, the settings, routes, adapters —
and every full collection walked them all again, over and over in a
reconnect storm, where allocations come fast. :func:`freeze_heap` runs one
collection and then ``gc.freeze()``: everything alive at that moment moves
to the permanent generation and is never walked again; the collector then
only looks at what connections and messages allocate.

It also raises the first generation's threshold from 700 to
:data:`GEN0_THRESHOLD` allocations: a new connection allocates a few hundred
containers, and a young collection every couple of connections found almost
nothing to free (their objects are either alive or freed by reference
counting). Measured in docs/operations.md ("Connections at scale").
"""

from __future__ import annotations

import gc

#: Allocations (minus deallocations) of tracked objects between young collections.
GEN0_THRESHOLD = 10000


def freeze_heap(gen0_threshold: int = GEN0_THRESHOLD) -> int:
    """Collect once, freeze everything alive, raise the young threshold;
    returns how many objects were frozen. Call once the node has started."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0_threshold, 1), gen1, gen2)
    return gc.get_freeze_count()
