"""structlog set-up: JSON lines in production, a console renderer on a tty.

The hub's own lines are rendered by structlog alone and written as bytes to
stderr: no stdlib ``LogRecord`` (two per line, with a frame walk for the
caller), which made a line cost about 80 µs — the hub logs one line per
connection opened and one per connection closed, so in a reconnect storm that
was a third of a connection's cost. The stdlib loggers of websockets and redis
go through a formatter that renders the same keys (``event``, ``level``,
``logger``, ``timestamp``). The level can change while running
(:func:`set_log_level`, on SIGHUP): loggers bound before the change follow it,
because the level is checked by the first processor rather than baked into
the bound loggers.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

import orjson
import structlog

from hub.ops.log_output import BufferedLines, LineLoggerFactory, TextLines

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


_NAMES = {"critical": logging.CRITICAL, "exception": logging.ERROR, **_LEVELS}
# The current minimum level of structlog events (stdlib records: the root logger's).
_threshold = logging.INFO


def _orjson_str(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj, default=str).decode()


def _orjson_bytes(obj: Any, **_: Any) -> bytes:
    return orjson.dumps(obj, default=str)


def _below_level(logger: Any, method_name: str, event_dict: Any) -> Any:
    if _NAMES.get(method_name, logging.INFO) < _threshold:
        raise structlog.DropEvent
    return event_dict


class _RedactCredentials(logging.Filter):
    """websockets at debug logs each handshake's request and answer and every
    frame: a token in the query, an ``Authorization`` header, a ``bearer.*``
    subprotocol or a frame's ``"token"`` must not reach the log."""

    _SECRETS = re.compile(
        r"(?i)(token=|authorization:\s*\S+\s|bearer\.|\"token\"\s*:\s*\")[^&\s,'\"]+"
    )

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self._SECRETS.sub(r"\1[redacted]", message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


_REDACT = _RedactCredentials()


class _HangupsInOneLine(logging.Filter):
    """websockets at debug logs a traceback for every client that hung up
    before its request was whole — a load balancer's TCP check, a port scan, a
    client that gave up. Nothing failed in the hub: the line says what ended
    the request, without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, EOFError):
            record.msg, record.args = f"{record.getMessage()}: {exc}", None
            record.exc_info = None
        return True


_HANGUPS = _HangupsInOneLine()


def set_log_level(level: str) -> None:
    """Change the level of every logger of the process, already bound ones included."""
    global _threshold
    numeric = _LEVELS.get(level, logging.INFO)
    _threshold = numeric
    logging.getLogger().setLevel(numeric)
    # websockets logs every connection opened and closed at INFO: above
    # debug, only its warnings. At debug, all of it — every frame of every
    # connection opened from then on (websockets' parser then reads them
    # all: hub.net.ws_internals).
    websockets_level = numeric if numeric == logging.DEBUG else max(numeric, logging.WARNING)
    for name in ("websockets.server", "websockets.client", "websockets"):
        # Filters act on a logger's own records: each websockets logger.
        logger = logging.getLogger(name)
        for quieter in (_REDACT, _HANGUPS):
            if quieter not in logger.filters:
                logger.addFilter(quieter)
    logging.getLogger("websockets").setLevel(websockets_level)
    logging.getLogger("redis").setLevel(max(numeric, logging.WARNING))


_out: BufferedLines | None = None


def flush_logs() -> None:
    """Write the lines still waiting (hub.ops.log_output); at the end of a run."""
    if _out is not None:
        _out.flush()


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    global _out
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]
    console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    own_renderer: Any
    if console:
        renderer: Any = structlog.dev.ConsoleRenderer()

        def own_renderer(logger: Any, method_name: str, event_dict: Any) -> bytes:
            return renderer(logger, method_name, event_dict).encode("utf-8", "backslashreplace")

    else:
        renderer = structlog.processors.JSONRenderer(serializer=_orjson_str)
        own_renderer = structlog.processors.JSONRenderer(serializer=_orjson_bytes)
    # Both formats write through one buffer (with a named logger, which
    # ``add_logger_name`` reads); the stdlib loggers' lines join it, in order.
    out = _out = BufferedLines(sys.stderr.buffer)
    stream = TextLines(out)
    structlog.configure(
        processors=[_below_level, *shared, own_renderer],
        logger_factory=LineLoggerFactory(out),
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    logging.getLogger().handlers = [handler]
    set_log_level(level)
