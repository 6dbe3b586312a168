"""Security building blocks of the broker, free of Quasar's other layers (they import only ``quasar.errors``
and third-party libraries): authentication providers chosen by Pulsar's method names (``token``, ``basic``,
``tls``) and the service that picks them, the authorization service (super users, tenant admins, namespace,
topic and subscription permissions), key and token helpers for ``quasar tokens``, and TLS contexts.

Follows Pulsar's broker (reference/security.md §1-3). The broker composes these in ``quasar.broker``.
"""
