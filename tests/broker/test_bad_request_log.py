"""aiohttp's records of requests it cannot parse become one rate-limited WARNING line (admin.bad_request_log)."""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

from quasar.broker.admin.bad_request_log import BadRequestLogFilter, install_bad_request_log_filter


def _record(error: BaseException) -> logging.LogRecord:
    exc_info = (type(error), error, error.__traceback__)
    return logging.LogRecord(
        "aiohttp.server", logging.ERROR, __file__, 1, "Error handling request from %s", ("1.2.3.4",), exc_info
    )


def test_parse_failures_become_one_warning_per_interval_with_a_count() -> None:
    log_filter = BadRequestLogFilter(interval_s=3600)
    first = _record(LineTooLong("/admin/v2/" + "x" * 10_000, "8190"))
    assert log_filter.filter(first)
    assert first.levelno == logging.WARNING and first.exc_info is None
    message = first.getMessage()
    assert message.startswith("Error handling request from 1.2.3.4: malformed request refused with 400")
    assert len(message) < 400  # the 10 kB line is not copied into the log
    assert not any(log_filter.filter(_record(LineTooLong("y" * 9000, "8190"))) for _ in range(100))
    log_filter._next_at = 0.0  # the interval has passed
    later = _record(HttpProcessingError(code=400, message="bad header"))
    assert log_filter.filter(later) and "(100 more since the last line)" in later.getMessage()


def test_server_errors_and_other_records_pass_unchanged() -> None:
    log_filter = BadRequestLogFilter()
    bug = _record(RuntimeError("a bug"))
    assert log_filter.filter(bug) and bug.levelno == logging.ERROR and bug.exc_info is not None
    server = _record(HttpProcessingError(code=500, message="internal"))
    assert log_filter.filter(server) and server.levelno == logging.ERROR


def test_installing_twice_adds_one_filter() -> None:
    install_bad_request_log_filter()
    install_bad_request_log_filter()
    filters = logging.getLogger("aiohttp.server").filters
    assert sum(isinstance(f, BadRequestLogFilter) for f in filters) == 1
