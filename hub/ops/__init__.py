"""For operators: the server API (``/api``), the status page (``/admin``) and
its static files, health and readiness, the Prometheus exposition of the
node's counters, and logging.

May import: :mod:`hub.core`, :mod:`hub.config`, :mod:`hub.net`,
:mod:`hub.cluster`, :mod:`hub.handlers`, :mod:`hub.errors`, :mod:`protocol`.
"""
