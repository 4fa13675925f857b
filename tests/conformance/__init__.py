"""The official MCP conformance suite against a real hub (``make conformance``):
see :mod:`tests.conformance.run`."""
