"""Bridges between hub spaces and other agent protocols.

Each adapter is a small object with ``start()``/``aclose()`` hosted by the
node. (The HTTP Agora and signed-envelope bridges land here.)
"""


class AdapterError(Exception):
    """Root of the adapters' exceptions."""
