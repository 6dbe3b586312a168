"""Errors raised by the Spark connector (:mod:`quasar.spark`).

    QuasarError
    └── QuasarSparkError
        ├── OptionError            an unknown, missing, conflicting or malformed option (also a ValueError)
        ├── SinkSchemaError        the DataFrame written has no ``value`` column or a column of the wrong type
        ├── SinkWriteError         a row could not be written (null ``value``/``topic``, send failure)
        ├── SaveModeError          a batch write in a save mode other than Append (also a ValueError)
        ├── WorkerSetupError       Spark's Python workers cannot import ``quasar`` (PYSPARK_PYTHON)
        ├── TopicNotFoundError     a topic named in ``topic``/``topics``/``startingOffsets`` does not exist
        ├── BrokerUnavailableError the broker (service.url) or its admin API (admin.url) cannot be reached
        └── DataLossError          a start position was trimmed, or an offset went backwards (failOnDataLoss)

Spark wraps Python exceptions raised in tasks in its own errors, keeping the message; each message therefore
names the option or column at fault.
"""

from __future__ import annotations

from quasar.errors import QuasarError

__all__ = [
    "BrokerUnavailableError",
    "DataLossError",
    "OptionError",
    "QuasarSparkError",
    "SaveModeError",
    "SinkSchemaError",
    "SinkWriteError",
    "TopicNotFoundError",
    "WorkerSetupError",
]


class QuasarSparkError(QuasarError):
    """Root of the Spark connector's errors."""


class OptionError(QuasarSparkError, ValueError):
    """An option of ``format("quasar")`` is unknown, missing, conflicting or malformed."""


class SinkSchemaError(QuasarSparkError, ValueError):
    """The DataFrame given to the sink lacks ``value`` or has a column of an unsupported name or type."""


class SinkWriteError(QuasarSparkError):
    """A row could not be produced (null ``value`` or ``topic``, or the broker refused the send)."""


class SaveModeError(QuasarSparkError, ValueError):
    """A batch write asked for a save mode the sink cannot honour (only Append is; Kafka's connector refuses
    Overwrite and Ignore the same way)."""


class WorkerSetupError(QuasarSparkError):
    """Spark's Python workers cannot import ``quasar`` (they run another interpreter than the driver)."""


class TopicNotFoundError(QuasarSparkError):
    """A topic to read does not exist on the broker."""


class BrokerUnavailableError(QuasarSparkError):
    """The broker or its admin REST API cannot be reached, or timed out."""


class DataLossError(QuasarSparkError):
    """Messages between two positions can no longer be read (trimmed, or the topic was recreated)."""
