"""structlog set-up: JSON lines in production, a console renderer on a tty.

The stdlib loggers of websockets and redis go through the same formatter. The
hub logs one line per connection opened and closed, never per message.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import orjson
import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def _orjson_str(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj, default=str).decode()


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]
    console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: Any = (
        structlog.dev.ConsoleRenderer()
        if console
        else structlog.processors.JSONRenderer(serializer=_orjson_str)
    )
    numeric = _LEVELS.get(level, logging.INFO)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric)
    # websockets logs handshake failures at INFO/ERROR; keep only warnings.
    logging.getLogger("websockets").setLevel(max(numeric, logging.WARNING))
    logging.getLogger("redis").setLevel(max(numeric, logging.WARNING))
