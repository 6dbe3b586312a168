"""Quasar's broker: Pulsar's binary protocol and admin REST on asyncio, over the managed ledger.

How the parts fit (each a small object given its inputs explicitly; DESIGN.md ``broker/``):

* ``app.BrokerApp`` is the composition root: it opens the message store (``quasar.storage``), the sqlite
  metadata backend (``quasar.metadata.sqlite``, migrating a previous release's table on first start through
  ``metadata_migration``), the managed-ledger factory and the ``BrokerService``, binds the listeners, and
  closes everything in reverse on stop. It is the only broker module that imports storage or picks a metadata
  backend (import-linter contracts).
* ``broker_service.BrokerService`` owns the loaded topics; ``resources.BrokerResources`` keeps tenants,
  namespaces, policies and partitioned-topic counts in memory (loaded at start, written through the async
  ``quasar.metadata.port.MetadataStore`` with compare-and-set), so LOOKUP and PARTITIONED_METADATA are
  dictionary look-ups and nothing on the event loop waits for SQLite or an fsync. Loading a topic, opening
  its managed ledger and creating a cursor are awaited; concurrent loads of one topic share one task.
* ``server_cnx.ServerCnx`` is one connection: frame decoding, keep-alive, write-side flow control, owned
  tasks. It owns one handler object per command family (``cnx.lookup``, ``cnx.producers``,
  ``cnx.consumers``), each given a small typed connection port (``cnx.ports``), and dispatches through a
  table of their bound methods.
* ``topic.PersistentTopic`` / ``non_persistent.NonPersistentTopic`` hold producers (``producer``, with
  ``access_modes``), deduplication (``dedup``) and subscriptions (``subscription``); a subscription asks one
  dispatcher object for its delivery policy (``dispatchers``: Exclusive/Failover, Shared, and
  ``key_shared_dispatcher`` for Key_Shared) and owns its timers.
* ``errors`` maps exceptions to Pulsar's ``ServerError`` codes through a table keyed by exception type;
  ``policies`` applies retention, TTL and backlog quotas; ``loop_lag`` measures the event loop's own lag
  (``GET /admin/v2/broker-stats/loop-lag``); ``admin`` serves Pulsar's admin v2 REST paths.

The wire vocabulary (``ServerError``, ``SubType``, ``AckType``, ``InitialPosition``, murmur3, ack sets) comes
from ``quasar.protocol``; the broker imports protocol, ledger and the metadata port, never the client side.
"""
