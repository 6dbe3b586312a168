"""Result enums of the store's hot paths, with RocketMQ's names.

Expected outcomes are values, not exceptions (RocketMQ ``AppendMessageStatus``, ``PutMessageStatus``,
``GetMessageStatus``): the caller branches on them.
"""

from __future__ import annotations

import enum


class AppendMessageStatus(enum.Enum):
    """Outcome of appending one record to a mapped file (RocketMQ ``AppendMessageStatus``).

    ``END_OF_FILE`` never leaves :meth:`CommitLog.append`: the commit log writes the blank record, rolls to
    the next segment and retries there.
    """

    PUT_OK = "PUT_OK"
    END_OF_FILE = "END_OF_FILE"
    MESSAGE_SIZE_EXCEEDED = "MESSAGE_SIZE_EXCEEDED"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class PutStatus(enum.Enum):
    """Outcome of a put (RocketMQ ``PutMessageStatus``).

    ``PUT_OK``: appended (and, after ``wait_flushed``, covered by an fdatasync in SYNC_FLUSH mode).
    ``FLUSH_DISK_TIMEOUT``: appended, but no fdatasync covered it within ``sync_flush_timeout_ms``.
    ``SERVICE_NOT_AVAILABLE``: the store refuses writes after an earlier I/O failure, or the disk is full
    (the disk guard, or ENOSPC while reserving disk blocks).
    ``CREATE_MAPPED_FILE_FAILED``: the next commit log segment or a consume queue file could not be created,
    e.g. the process is out of file descriptors (EMFILE / ENFILE): transient, the next put tries again.
    ``MESSAGE_ILLEGAL``: bad topic / queue id / body (too big for ``max_message_size`` or for a segment).
    ``PROPERTIES_SIZE_EXCEEDED``: the encoded properties exceed 32767 bytes.
    ``UNKNOWN_ERROR``: an fdatasync failed (EIO...): the data may not be durable.
    """

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetStatus(enum.Enum):
    """Outcome of a read by queue offset (RocketMQ ``GetMessageStatus``, semantics.md A11).

    ========================  =============================================  ========================
    status                    condition                                      ``next_begin_offset``
    ========================  =============================================  ========================
    NO_MATCHED_LOGIC_QUEUE    no consume queue for (topic, queue id)         0
    NO_MESSAGE_IN_QUEUE       the queue's max offset is 0                    0
    OFFSET_TOO_SMALL          offset < min offset                            min offset
    OFFSET_OVERFLOW_ONE       offset == max offset (caught up)               offset
    OFFSET_OVERFLOW_BADLY     offset > max offset                            max offset
    OFFSET_FOUND_NULL         no consume queue file holds the offset         start of the next file
    MESSAGE_WAS_REMOVING      the commit log no longer holds the data        offset + 1
    FOUND                     at least one message                           last offset + 1
    ========================  =============================================  ========================
    """

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
