"""Quasar's own Pulsar client: an asyncio core (:class:`AsyncClient`) and a blocking facade (:class:`Client`)
shaped like the official ``pulsar.Client``. Imports only :mod:`quasar.protocol` (DESIGN.md)."""

from quasar.protocol import EARLIEST, LATEST, CompressionType, MessageId

from .client import AsyncClient
from .config import (
    ClientConfig,
    ConsumerConfig,
    ConsumerType,
    DeadLetterPolicy,
    HashingScheme,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerConfig,
    ReaderConfig,
)
from .errors import (
    AlreadyClosedError,
    BrokerResponseError,
    ClientError,
    ConnectError,
    ConnectionClosedError,
    InvalidMessageError,
    LookupError_,
    MessageTooBigError,
    OperationTimeoutError,
    ProducerQueueIsFullError,
    ReceiveTimeoutError,
    SendTimeoutError,
)
from .message import Message
from .sync import Client, Consumer, Producer, Reader

__all__ = [
    "EARLIEST",
    "LATEST",
    "AlreadyClosedError",
    "AsyncClient",
    "BrokerResponseError",
    "Client",
    "ClientConfig",
    "ClientError",
    "CompressionType",
    "ConnectError",
    "ConnectionClosedError",
    "Consumer",
    "ConsumerConfig",
    "ConsumerType",
    "DeadLetterPolicy",
    "HashingScheme",
    "InitialPosition",
    "InvalidMessageError",
    "LookupError_",
    "Message",
    "MessageId",
    "MessageTooBigError",
    "OperationTimeoutError",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerConfig",
    "ProducerQueueIsFullError",
    "Reader",
    "ReaderConfig",
    "ReceiveTimeoutError",
    "SendTimeoutError",
]
