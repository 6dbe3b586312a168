"""The root of Quasar's exception tree.

Every exception Quasar raises derives from :class:`QuasarError`. Each layer keeps its own tree under it:

    QuasarError
    ├── ProtocolError            quasar.protocol.errors   (LocalProtocolError, RemoteProtocolError, ...)
    ├── StorageError             quasar.storage.errors    (CorruptRecordError, DiskFullError, ...)
    ├── MetadataStoreError       quasar.metadata.errors   (NotFoundError, BadVersionError, ...)
    ├── ManagedLedgerError       quasar.ledger.errors     (ManagedLedgerFencedError, CursorAlreadyClosedError, ...)
    ├── BrokerError              quasar.broker.errors     (carries a Pulsar ServerError code)
    ├── ClientError              quasar.client.errors     (ConnectError, ConnectionClosedError, ...)
    ├── NameServerError          quasar.nameserver.errors (InvalidRequestError, NameServerTimeoutError, ...)
    ├── QuasarSparkError         quasar.spark.errors      (OptionError, ...)
    ├── DemoError                quasar.cli.flights       (the ``quasar demo`` commands)
    ├── NameServerProcessError   quasar.testing           (the name server subprocess harness)
    └── BrokerProcessError       quasar.testing           (the broker subprocess harness)
"""


class QuasarError(Exception):
    """Root of every exception raised by Quasar."""
