"""Running nodes as processes: the ``agora-hub`` command, the servers on the
WebSocket and HTTP ports around one node, one node per process (SIGHUP
reloads, SIGTERM drains) or several workers sharing the ports, whose metrics
every scrape shows.

May import all of ``hub``, :mod:`adapters` (only to build them from the
settings) and the client tools of :mod:`agora_client`.
"""
