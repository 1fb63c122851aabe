"""Logging for the ``trikafka`` command: plain text (the default) or one JSON object per line.

``configure_logging(level, "json")`` makes every logger (trikafka's, kazoo's,
trio's) write records as JSON lines with stable keys::

    {"ts": "2026-01-02T03:04:05.678Z", "level": "INFO", "logger": "trikafka.broker.server",
     "msg": "log dir ./data loaded (0 logs, recovery not needed)"}

followed by any ``extra=`` fields the call passed, then ``exc`` (the formatted
traceback) when there is one.  ``ts`` is UTC with milliseconds.  An extra
field named like a fixed key is written as ``extra_<name>`` instead, so the
fixed keys always mean the same thing.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FIXED_KEYS = ("ts", "level", "logger", "msg")
# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object on one line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        seconds = time.gmtime(record.created)
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", seconds) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_"):
                entry[f"extra_{key}" if key in FIXED_KEYS or key == "exc" else key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # default=str: an extra field that JSON cannot encode is written as its str(), never dropped.
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(level: str = "INFO", log_format: str = "text", stream: TextIO | None = None) -> None:
    """Send every logger's records at ``level`` and above to ``stream`` (stderr) in ``log_format``.

    Replaces the root logger's handlers, so calling it twice never prints a
    record twice.  Raises ``ValueError`` for an unknown format or level.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"unknown log format {log_format!r} (expected one of {', '.join(LOG_FORMATS)})")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def json_enabled() -> bool:
    """Whether the root logger writes JSON (the command's own status lines then go through it too)."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def announce(logger: logging.Logger, text: str, **fields: Any) -> None:
    """A command's status line (``trikafka: serving on ...``): plain on stderr, or a JSON log record.

    In text mode the line stays exactly ``text`` (scripts wait for it); in
    JSON mode it is an INFO record of ``logger`` with ``fields`` as extra keys,
    so stderr holds nothing but JSON lines.
    """
    if json_enabled():
        logger.info(text, extra=fields)
    else:
        print(text, file=sys.stderr, flush=True)
