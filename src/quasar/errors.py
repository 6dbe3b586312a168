"""The root of Quasar's exception tree.

Every exception Quasar raises derives from :class:`QuasarError`. Each layer keeps its own tree under it:

    QuasarError
    ├── ProtocolError            quasar.protocol.errors (LocalProtocolError, RemoteProtocolError, ...)
    ├── StorageError             quasar.storage.errors  (CorruptRecordError, DiskFullError, ...)
    ├── ManagedLedgerError       quasar.ledger.errors   (ManagedLedgerFencedError, CursorClosedError, ...)
    └── BrokerError              quasar.broker.errors   (carries a Pulsar ServerError code)
"""


class QuasarError(Exception):
    """Root of every exception raised by Quasar."""
