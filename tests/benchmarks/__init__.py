"""Benchmarks of the hub against a ``websockets.broadcast`` baseline (``make bench``).

Not collected by pytest: nothing here is named ``test_*`` and the package is
outside the configured testpaths. See docs/performance.md for the method.
"""
