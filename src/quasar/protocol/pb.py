"""The generated protobuf classes of ``proto/PulsarApi.proto`` (package ``pulsar.proto``).

``from quasar.protocol.pb import BaseCommand, MessageMetadata`` — the same classes as
``quasar.protocol.proto.PulsarApi_pb2``, under a short stable name.
"""

from .proto.PulsarApi_pb2 import *  # noqa: F403
from .proto.PulsarApi_pb2 import DESCRIPTOR  # noqa: F401
