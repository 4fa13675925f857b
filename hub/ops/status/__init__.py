"""The live status page at ``/admin``: its routes (:mod:`~hub.ops.status.page`)
and the static HTML, CSS and script it serves (``static/``)."""
