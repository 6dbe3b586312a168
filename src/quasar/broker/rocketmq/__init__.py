"""RocketMQ 5's gRPC API (``apache.rocketmq.v2.MessagingService``) on Quasar's store (issue 18; docs/rocketmq.md).

Modules: ``stubs`` (the generated classes, loaded without the client), ``status`` / ``validation`` (codes
and the proxy's checks), ``mapping`` (RocketMQ Message <-> stored Pulsar entry, both directions),
``context`` (what every handler group shares: the broker service, settings, topic resolution), ``clients``
(the client registry), ``route`` (QueryRoute, QueryAssignment), ``client_activity`` (Heartbeat, Telemetry,
NotifyClientTermination), ``send`` (SendMessage), ``message_type`` (topic ``message.type``),
``transaction`` / ``transaction_store`` (half messages, EndTransaction, the checker), ``server`` (the
servicer and the ``grpc.aio`` listener).
The package needs ``rocketmq-python-client`` and ``grpcio``; the broker imports it only when the RocketMQ
listener is on.
"""
