"""The client's per-message codec: the compiled ``quasar.client._codec_c`` when it is built, else its
pure-Python twin ``quasar.client._codec_py`` (``QUASAR_PURE_PYTHON=1`` forces the twin; DESIGN.md "Compiled hot
paths"). The twin's docstrings are the specification of both; type checkers see the twin.

What runs here per message: the batch container (:class:`BatchContainer`, a SingleMessageMetadata and the item
appended to one buffer), the SEND frame (:func:`encode_metadata`, :func:`encode_send`: MessageMetadata,
command and CRC-32C in one call), the batch split on receive (:func:`split_batch`, Message objects built without
``__init__``) and receipts (:func:`complete_receipt`, one MessageId per waiter).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quasar.native import load_twin

__all__ = [
    "BatchContainer",
    "complete_receipt",
    "encode_metadata",
    "encode_send",
    "encode_single_metadata",
    "split_batch",
]

if TYPE_CHECKING:
    from ._codec_py import (
        BatchContainer,
        complete_receipt,
        encode_metadata,
        encode_send,
        encode_single_metadata,
        split_batch,
    )
else:
    _impl = load_twin("quasar.client._codec")
    BatchContainer = _impl.BatchContainer
    complete_receipt = _impl.complete_receipt
    encode_metadata = _impl.encode_metadata
    encode_send = _impl.encode_send
    encode_single_metadata = _impl.encode_single_metadata
    split_batch = _impl.split_batch
