"""Topic compaction (Pulsar's ``TwoPhaseCompactor`` and ``CompactedTopicImpl``; reference security.md §5).

Modules: ``messages`` (keys of an entry's messages, batch rebuild), ``view`` (the compacted ledger, the view
record in the ``__compaction`` cursor, reads by original position), ``reads`` (a ``read_compacted``
subscription's position in the view), ``compactor`` (the two phases), ``service`` (triggers, status,
threshold monitor). The admin REST routes are ``quasar.broker.admin.compaction_routes``.
"""
