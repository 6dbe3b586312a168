"""The client's per-message codec: the compiled ``quasar.client._codec_c`` and ``_incoming_c`` when they are
built, else their pure-Python twins ``_codec_py`` and ``_incoming_py`` (``QUASAR_PURE_PYTHON=1`` forces the
twins; DESIGN.md "Compiled hot paths"). The twins' docstrings are the specification of both; type checkers see
the twins.

What runs here per message: the batch container (:class:`BatchContainer`, a SingleMessageMetadata and the item
appended to one buffer), the SEND frame (:func:`encode_metadata`, :func:`encode_send`: MessageMetadata, command
and CRC-32C in one call), the batch split on receive (:func:`split_batch`, Message objects built without
``__init__``), receipts (:func:`complete_receipt`, one MessageId per waiter), grouped acks (:func:`encode_ack`)
and the frames that arrive once per message (:func:`read_frames`: SEND_RECEIPT and MESSAGE decoded without
protobuf command objects, everything else handed whole to the protocol's FrameDecoder).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quasar.native import load_twin

__all__ = [
    "BatchContainer",
    "complete_receipt",
    "encode_ack",
    "encode_metadata",
    "encode_send",
    "encode_single_metadata",
    "read_frames",
    "split_batch",
]

if TYPE_CHECKING:
    from ._codec_py import (
        BatchContainer,
        encode_ack,
        encode_metadata,
        encode_send,
        encode_single_metadata,
    )
    from ._incoming_py import complete_receipt, read_frames, split_batch
else:
    _send = load_twin("quasar.client._codec")
    BatchContainer = _send.BatchContainer
    encode_ack = _send.encode_ack
    encode_metadata = _send.encode_metadata
    encode_send = _send.encode_send
    encode_single_metadata = _send.encode_single_metadata
    _receive = load_twin("quasar.client._incoming")
    complete_receipt = _receive.complete_receipt
    read_frames = _receive.read_frames
    split_batch = _receive.split_batch
