"""A bounded soak run of a real cluster under churn and failures (``make soak``).

See :mod:`tests.soak.run`; not part of ``make test``.
"""
