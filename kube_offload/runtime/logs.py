"""Logging setup shared by every component: plain or JSON lines, object-stamped records."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Mapping, MutableMapping

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(level: str = "INFO", *, json_format: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_format:
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The kubernetes client logs every retry of urllib3 at WARNING; keep ours readable.
    logging.getLogger("urllib3").setLevel(logging.ERROR)


class ObjectLogger(logging.LoggerAdapter[logging.Logger]):
    """Prefixes every message with ``[namespace/name]`` of the object being handled."""

    extra: Mapping[str, object]  # always given: {"key": ...}

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[str, MutableMapping[str, Any]]:
        return f"[{self.extra.get('key', '-')}] {msg}", kwargs
