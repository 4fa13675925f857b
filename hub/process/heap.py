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
counting). At 10,000, forming a space of 2,000 agents still ran 12 young
collections and one middle-generation one: 0.08–0.10 CPU-s, about a sixth
of the join; at 50,000 it runs two young ones, 0.02 CPU-s (gc.callbacks, in
docs/performance.md). The middle-generation walk of those connections is
not saved but moved out of the burst: it comes with a later collection.
And full collections wait for 100 middle-generation ones instead of 10:
in a storm the whole population of connections is replaced, so
CPython's rule that a full collection waits until a quarter of the old
objects are new never held it back, and each full walk over a hundred
thousand connections' objects took 15 % of a 10,000-agent storm's CPU
(py-spy --native). Cyclic garbage is rare here (reference counting frees
nearly everything) and a full collection still comes, only later.
Measured in docs/operations.md ("Connections at scale").
"""

from __future__ import annotations

import gc

#: Allocations (minus deallocations) of tracked objects between young collections.
GEN0_THRESHOLD = 50_000
#: Middle-generation collections between two full ones (CPython: 10).
GEN2_THRESHOLD = 100


def freeze_heap(gen0_threshold: int = GEN0_THRESHOLD, gen2_threshold: int = GEN2_THRESHOLD) -> int:
    """Collect once, freeze everything alive, raise the young threshold;
    returns how many objects were frozen. Call once the node has started."""
    gc.collect()
    gc.freeze()
    _, gen1, _ = gc.get_threshold()
    gc.set_threshold(max(gen0_threshold, 1), gen1, max(gen2_threshold, 1))
    return gc.get_freeze_count()
