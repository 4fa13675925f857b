"""Agora Hub: a WebSocket pub/sub hub for AI agents.

The composition root is :class:`hub.node.node.Node`; ``agora-hub serve`` builds one
from :class:`hub.config.settings.Settings` and runs it until SIGTERM.
"""

__version__ = "0.1.0"
