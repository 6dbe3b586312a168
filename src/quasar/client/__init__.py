"""Quasar's own Pulsar client: an asyncio core (:class:`AsyncClient`) and a blocking facade (:class:`Client`)
shaped like the official ``pulsar.Client``. Imports only :mod:`quasar.protocol` (DESIGN.md), whose vocabulary
it uses: :class:`InitialPosition` is ``quasar.protocol.enums.InitialPosition``, :class:`ConsumerType` keeps the
official names and maps each to the wire ``SubType``, :class:`MessageId` (with ``serialize`` / ``deserialize``)
is the protocol's.

How the parts fit (each a small object with its own state, given its inputs explicitly):

* :class:`AsyncClient` implements :class:`~quasar.client.context.ClientContext`, the port producers and
  consumers reach it through (settings, connection pool, lookup, ids, ``forget``).
* :class:`~quasar.client.client_cnx.ClientCnx` routes frames to producers and consumers through the
  ``ProducerHandler`` / ``ConsumerHandler`` ports (``on_receipt``, ``on_message``, ``on_connection_closed`` ...).
* A producer owns a :class:`~quasar.client.producer_encode.MessageEncoder` and, with batching, a
  :class:`~quasar.client.producer_batch.Batcher`; a consumer owns a
  :class:`~quasar.client.receiver_queue.ReceiverQueue` (or delivers into its multi-topic parent's),
  :class:`~quasar.client.consumer_flow.FlowControl`, an :class:`~quasar.client.consumer_acks.Acknowledger`
  and a :class:`~quasar.client.consumer_incoming.DeliveryFilter`.
* Every task and timer has an owner that cancels it on close: a
  :class:`~quasar.client._tasks.TaskOwner` per connection, producer and consumer; the batch, ack-group and
  request timers belong to the batcher, the acknowledger and the request.
* The blocking facade (:mod:`quasar.client.sync`, :mod:`quasar.client.sync_loop`) uses only documented
  public attributes of the asyncio objects.
"""

from quasar.protocol import EARLIEST, LATEST, CompressionType, MessageId

from .auth import Authentication, AuthenticationBasic, AuthenticationTLS, AuthenticationToken
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
from .entries import StoredEntry
from .errors import (
    AlreadyClosedError,
    AuthenticationError,
    AuthorizationError,
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
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationError",
    "AuthenticationTLS",
    "AuthenticationToken",
    "AuthorizationError",
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
    "StoredEntry",
]
