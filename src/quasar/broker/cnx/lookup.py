"""Connection and lookup commands: CONNECT (a second one), PING, PONG, PARTITIONED_METADATA, LOOKUP and
GET_TOPICS_OF_NAMESPACE (reference/pulsar-protocol.md §6; AUTH_RESPONSE is ``cnx.auth``'s, the schema commands
are ``schemas``). LOOKUP and PARTITIONED_METADATA need produce or consume permission when authorization is on.

The first CONNECT is answered by ServerCnx itself (it switches the connection to its full dispatch table);
everything here runs once connected. Lookups are answered by ``BrokerService.lookup``: a standalone broker owns
every topic and answers Connect with its own URL (Pulsar standalone); a cluster member answers from the
cluster's placement (``quasar.broker.cluster.ownership``).
Failures answer the command's error reply with the ServerError of ``errors.server_error_of``.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from quasar.broker.cluster.model import LookupKind
from quasar.broker.cnx.ports import CommandPort, HandlerTable
from quasar.broker.errors import NamespaceNotFoundError, server_error_of
from quasar.broker.system_topics import user_topics
from quasar.errors import QuasarError
from quasar.protocol import CommandType, TopicName, commands
from quasar.protocol.enums import ServerError
from quasar.protocol.errors import InvalidTopicNameError

if TYPE_CHECKING:
    from quasar.protocol.decoder import Frame

__all__ = ["LookupCommands", "TopicsMode"]


class TopicsMode(enum.IntEnum):
    """``CommandGetTopicsOfNamespace.Mode``: which domains a namespace listing covers."""

    PERSISTENT = 0
    NON_PERSISTENT = 1
    ALL = 2


def _lookup_error_of(exc: QuasarError) -> tuple[ServerError, str]:
    """The ServerError a LOOKUP or PARTITIONED_METADATA failure answers: a topic whose namespace does not exist
    is TopicNotFound there, which the official client does not retry (Pulsar answers it so; elsewhere an unknown
    namespace stays a MetadataError)."""
    if isinstance(exc, NamespaceNotFoundError):
        return ServerError.TopicNotFound, str(exc)
    return server_error_of(exc)


class LookupCommands:
    """The connection-level and lookup commands of one connection."""

    def __init__(self, cnx: CommandPort) -> None:
        self._cnx = cnx

    def handlers(self) -> HandlerTable:
        """This family's commands: ``CommandType`` -> bound handler, merged into the connection's table."""
        return {
            CommandType.CONNECT: self.handle_connect_again,
            CommandType.PING: self.handle_ping,
            CommandType.PONG: self.handle_pong,
            CommandType.PARTITIONED_METADATA: self.handle_partitioned_metadata,
            CommandType.LOOKUP: self.handle_lookup,
            CommandType.GET_TOPICS_OF_NAMESPACE: self.handle_get_topics_of_namespace,
        }

    # ------------------------------------------------------------------ connection
    def handle_connect_again(self, frame: Frame) -> None:
        """A second CONNECT is a protocol error: the connection is closed (Pulsar ServerCnx)."""
        self._cnx.close("CONNECT received twice on one connection")

    def handle_ping(self, frame: Frame) -> None:
        """PING -> PONG (keep-alive)."""
        self._cnx.write(commands.new_pong())

    def handle_pong(self, frame: Frame) -> None:
        """PONG: nothing to do."""
        pass  # any received frame already cleared the keep-alive flag

    # ------------------------------------------------------------------ lookup
    def handle_partitioned_metadata(self, frame: Frame) -> None:
        """PARTITIONED_METADATA: the partition count (0 = not partitioned).

        An invalid topic name is answered NotAllowedError with the name's fault in the message, not
        InvalidTopicName as Pulsar's broker does: the official C++ client (hence the Python one) retries a
        partition-metadata lookup that failed with InvalidTopicName until its operation timeout (its
        ``isResultRetryable`` does not list it as final), while NotAllowed ends the create/subscribe at once;
        the Java client treats both as final. LOOKUP, PRODUCER and SUBSCRIBE answer InvalidTopicName."""
        cmd = frame.command.partitionMetadata
        try:
            topic = TopicName.parse(cmd.topic)
            self._cnx.service.security.check_lookup(self._cnx.role, topic)
            partitions = self._cnx.service.partitions(topic)
        except InvalidTopicNameError as exc:
            self._cnx.write(
                commands.new_partitioned_metadata_error(
                    cmd.request_id, ServerError.NotAllowedError, f"InvalidTopicName: {exc}"
                )
            )
            return
        except QuasarError as exc:
            code, message = _lookup_error_of(exc)
            self._cnx.write(commands.new_partitioned_metadata_error(cmd.request_id, code, message))
            return
        self._cnx.write(commands.new_partitioned_metadata_response(cmd.request_id, partitions))

    def handle_lookup(self, frame: Frame) -> None:
        """LOOKUP: the owning broker's URLs on the listener asked for (``BrokerService.lookup``: Connect, or
        Redirect with ``authoritative``); a Failed answer with the error's ServerError otherwise (a topic in
        an unknown namespace: TopicNotFound; no live master for its group: ServiceNotReady)."""
        cmd = frame.command.lookupTopic
        self._cnx.spawn(
            self._lookup(cmd.request_id, cmd.topic, cmd.authoritative, cmd.advertised_listener_name)
        )

    async def _lookup(self, request_id: int, name: str, authoritative: bool, listener: str) -> None:
        try:
            topic = TopicName.parse(name)
            self._cnx.service.security.check_lookup(self._cnx.role, topic)
            answer = await self._cnx.service.lookup(topic, authoritative=authoritative, listener=listener)
        except QuasarError as exc:
            code, message = _lookup_error_of(exc)
            self._cnx.write(commands.new_lookup_error(request_id, code, message))
            return
        self._cnx.write(
            commands.new_lookup_response(
                request_id,
                answer.service_url,
                broker_service_url_tls=answer.service_url_tls or None,
                authoritative=answer.authoritative,
                redirect=answer.kind is LookupKind.REDIRECT,
            )
        )

    def handle_get_topics_of_namespace(self, frame: Frame) -> None:
        """GET_TOPICS_OF_NAMESPACE: the topics of the namespace in the requested domains (``TopicsMode``);
        AuthorizationError without produce or consume on the namespace."""
        cmd = frame.command.getTopicsOfNamespace
        service = self._cnx.service
        mode = int(cmd.mode)
        try:
            service.security.check_namespace_lookup(self._cnx.role, cmd.namespace)
            if not service.namespace_exists(cmd.namespace):
                raise NamespaceNotFoundError(f"Namespace {cmd.namespace} does not exist")
            topics: list[str] = []
            if mode in (TopicsMode.PERSISTENT, TopicsMode.ALL):
                topics += service.list_topics(cmd.namespace, "persistent")
            if mode in (TopicsMode.NON_PERSISTENT, TopicsMode.ALL):
                topics += service.list_topics(cmd.namespace, "non-persistent")
            topics = user_topics(topics)  # as Pulsar's getListOfUserTopics: pattern consumers never see them
        except QuasarError as exc:
            code, message = server_error_of(exc)
            self._cnx.write(commands.new_error(cmd.request_id, code, message))
            return
        self._cnx.write(commands.new_get_topics_of_namespace_response(cmd.request_id, topics))
