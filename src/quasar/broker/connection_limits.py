"""Connection admission: ``broker_max_connections`` and ``broker_max_connections_per_ip`` (Pulsar's
``brokerMaxConnections`` / ``brokerMaxConnectionsPerIp`` and its ``ConnectionController``).

Pulsar's ServerCnx asks the controller in ``channelActive``, before anything of the connection is read or
allocated, and closes the channel at once when a limit is reached; Quasar's ServerCnx does the same in
``connection_made``. Pulsar's defaults are 0 / 0 (unlimited); Quasar ships bounded ones (``BrokerConfig``)
so that a connection flood hits a clear refusal before the process runs out of file descriptors (every
connection holds one, and the store needs its own for commit-log segments, consume queues and the metadata
database).

Refusals are logged through :class:`RateLimitedLog`: a flood must not become a log flood.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

__all__ = ["ConnectionController", "RateLimitedLog"]


class RateLimitedLog:
    """At most one WARNING per ``interval_s`` seconds through ``logger``; the lines suppressed meanwhile are
    counted and reported with the next one that is written."""

    def __init__(
        self, logger: logging.Logger, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._next_at = float("-inf")
        self._suppressed = 0

    def warning(self, message: str, *args: object) -> None:
        """Log ``message % args`` now, or count it when a line was written less than ``interval_s`` ago."""
        now = self._clock()
        if now < self._next_at:
            self._suppressed += 1
            return
        self._next_at = now + self._interval_s
        if self._suppressed:
            message += " (%d more like it in the last %.0f s)"
            args = (*args, self._suppressed, self._interval_s)
            self._suppressed = 0
        self._logger.warning(message, *args)


class ConnectionController:
    """Counts the open connections of one listener, in total and per remote IP address.

    ``max_connections`` / ``max_connections_per_ip``: limits (0 = unlimited, as Pulsar). :meth:`try_open` is
    called once per accepted connection and, when it returned None, :meth:`closed` once when it ends.
    """

    def __init__(self, max_connections: int, max_connections_per_ip: int) -> None:
        if max_connections < 0 or max_connections_per_ip < 0:
            raise ValueError(
                f"connection limits must be >= 0 (0 = unlimited), got {max_connections} and "
                f"{max_connections_per_ip}"
            )
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.total = 0
        self._per_ip: Counter[str] = Counter()

    def connections_of(self, ip: str) -> int:
        """Open connections from ``ip``."""
        return self._per_ip[ip]

    def try_open(self, ip: str) -> str | None:
        """Count a new connection from ``ip``; returns None when it may be served, else why it is refused
        (nothing is counted then)."""
        if self.max_connections and self.total >= self.max_connections:
            return (
                f"Reached the maximum number of connections {self.max_connections} (broker_max_connections)"
            )
        if self.max_connections_per_ip and self._per_ip[ip] >= self.max_connections_per_ip:
            return (
                f"Reached the maximum number of connections {self.max_connections_per_ip} from {ip} "
                "(broker_max_connections_per_ip)"
            )
        self.total += 1
        self._per_ip[ip] += 1
        return None

    def closed(self, ip: str) -> None:
        """A connection counted by :meth:`try_open` ended."""
        self.total -= 1
        remaining = self._per_ip[ip] - 1
        if remaining > 0:
            self._per_ip[ip] = remaining
        else:
            del self._per_ip[ip]
