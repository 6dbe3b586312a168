"""A logging filter for aiohttp's server logger: malformed HTTP requests are one rate-limited WARNING line.

aiohttp logs every request it cannot parse (a request line over 8,190 bytes, a bad header, a broken chunked
body) at ERROR with a full traceback, before any handler or middleware runs; the client gets a 400 either way.
A hostile client could flood the log (and the disk) that way, so such records become one WARNING line without the
traceback, at most one per ``interval_s`` with the number suppressed since the previous one. Other aiohttp errors
(5xx, bugs) pass unchanged.
"""

from __future__ import annotations

import logging
import time

from aiohttp.http_exceptions import HttpProcessingError

__all__ = ["BadRequestLogFilter", "install_bad_request_log_filter"]

_AIOHTTP_SERVER = "aiohttp.server"


class BadRequestLogFilter(logging.Filter):
    """Rewrites aiohttp's records of 4xx parse failures (module docstring); ``interval_s``: seconds between
    two lines."""

    def __init__(self, interval_s: float = 10.0) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._next_at = 0.0
        self._suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, HttpProcessingError) or not 400 <= error.code < 500:
            return True
        now = time.monotonic()
        if now < self._next_at:
            self._suppressed += 1
            return False
        self._next_at = now + self._interval_s
        more = f" ({self._suppressed} more since the last line)" if self._suppressed else ""
        self._suppressed = 0
        reason = " ".join(str(error.message).split())[:200]
        record.msg = f"{record.getMessage()}: malformed request refused with {error.code}: {reason}{more}"
        record.args = ()
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info, record.exc_text = None, None
        return True


def install_bad_request_log_filter() -> None:
    """Add one :class:`BadRequestLogFilter` to aiohttp's server logger (idempotent: several brokers in one
    process share it)."""
    logger = logging.getLogger(_AIOHTTP_SERVER)
    if not any(isinstance(f, BadRequestLogFilter) for f in logger.filters):
        logger.addFilter(BadRequestLogFilter())
