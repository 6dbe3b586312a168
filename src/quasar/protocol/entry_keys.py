"""The message keys of a stored Pulsar entry, for the store's IndexFile (query by key, RocketMQ-style).

:func:`entry_keys` returns ``MessageMetadata.partition_key`` (if present) and, for a batch that is not
encrypted, the ``partition_key`` of every SingleMessageMetadata in the (decompressed) payload, in order. It
runs on the store's reput thread for every entry, so the walk is compiled (``_entry_keys_c.c``, with the GIL
released on large entries; pure-Python twin ``_entry_keys_py.py``, forced by ``QUASAR_PURE_PYTHON=1``) and
makes no Python object per message: an entry whose messages carry no key costs one pass over its bytes.

Split of the work: the twin reads the headers, the MessageMetadata and an uncompressed batch in one call;
for a compressed batch it returns the codec, and this module decompresses (the codecs are Python libraries,
:mod:`quasar.protocol.compression`), after checking ``uncompressed_size`` against a limit, and hands the
result back to the twin's ``batch_keys``.

Bounded work: nothing is inflated past ``max_uncompressed_size`` (the broker passes its
``max_message_size``), and a batch declaring more items than its (uncompressed) bytes can hold, at 6 bytes
per item at least, is refused before its items are read, so the cost of an entry is linear in its bytes.

What is checked: the header layout and sizes, the protobuf wire format of the MessageMetadata and of each
SingleMessageMetadata (not of sub-messages such as properties), ``payload_size`` present and inside the
payload, the item count, no bytes left over, and UTF-8 in every key. Required fields of the
MessageMetadata, the checksum and other strings are not checked (publish did that).
"""

from __future__ import annotations

from quasar.native import load_twin

from ._entry_keys_py import MIN_BATCH_ITEM_SIZE
from .compression import decompress
from .errors import CompressionError, MalformedBatchError
from .frame import DEFAULT_MAX_MESSAGE_SIZE

__all__ = ["MAX_UNCOMPRESSED_SIZE", "entry_keys"]

MAX_UNCOMPRESSED_SIZE = DEFAULT_MAX_MESSAGE_SIZE
"""Default limit in bytes on a compressed batch's ``uncompressed_size``, checked before decompressing (the
Java consumer discards a message whose uncompressed size exceeds the max message size likewise)."""

_impl = load_twin("quasar.protocol._entry_keys")


def entry_keys(
    body: bytes | bytearray | memoryview, *, max_uncompressed_size: int = MAX_UNCOMPRESSED_SIZE
) -> list[str]:
    """The message keys of a stored entry.

    Args:
        body: ``[0x0e02 size bem]? [0x0e01 crc]? [u32 metadataSize][MessageMetadata][payload]`` (a commit
            log record body, or a SEND frame's ``headers_and_payload``).
        max_uncompressed_size: largest ``uncompressed_size`` in bytes a compressed batch may announce.

    Returns:
        The keys as str, in order: the entry's partition key if set, then, for an unencrypted batch
        (``num_messages_in_batch`` present, no ``encryption_keys``), each message's partition key if set.
        Empty keys are returned as they are. ``[]`` when no message has a key.

    Raises:
        MalformedFrameError: a header or the metadata runs past the end, the MessageMetadata is unparsable,
            or its partition key is not UTF-8.
        MalformedBatchError: the batch does not split into ``num_messages_in_batch`` items (more items
            than its bytes can hold at 6 bytes each, refused before any is read or anything inflated; sizes
            past the end, an unparsable SingleMessageMetadata or one without ``payload_size``, a key that is
            not UTF-8, bytes left over).
        CompressionError: ``uncompressed_size`` above ``max_uncompressed_size``, or the payload does not
            decompress to it.
    """
    keys, compression, uncompressed_size, count, payload_start = _impl.scan_entry(body)
    if compression:
        if uncompressed_size > max_uncompressed_size:
            raise CompressionError(
                f"uncompressed_size {uncompressed_size} is above the limit of {max_uncompressed_size} bytes"
            )
        if (
            count > uncompressed_size // MIN_BATCH_ITEM_SIZE
        ):  # checked before inflating, as the twins do after
            raise MalformedBatchError(
                f"num_messages_in_batch {count} cannot fit in {uncompressed_size} bytes "
                f"(a batch item takes at least {MIN_BATCH_ITEM_SIZE})"
            )
        payload = decompress(compression, memoryview(body).cast("B")[payload_start:], uncompressed_size)
        keys.extend(_impl.batch_keys(payload, count))
    result: list[str] = keys
    return result
