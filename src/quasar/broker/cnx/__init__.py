"""The command families of a broker connection (``ServerCnx``), each behind a small typed port.

- ``ports``: ``CommandPort`` (write a frame, close with a reason, spawn an owned task, remote address, config,
  BrokerService) and its producer / consumer extensions with the connection's ``IdRegistry``;
- ``lookup``: CONNECT (again), PING, PONG, AUTH_RESPONSE, PARTITIONED_METADATA, LOOKUP,
  GET_TOPICS_OF_NAMESPACE, GET_SCHEMA;
- ``producers``: PRODUCER, SEND, CLOSE_PRODUCER;
- ``consumers``: SUBSCRIBE, FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES, CLOSE_CONSUMER, UNSUBSCRIBE, SEEK,
  GET_LAST_MESSAGE_ID, CONSUMER_STATS (with the message-id rules of ``positions``).

Each family contributes ``handlers()``, a table from CommandType to bound method; ServerCnx merges them into
its dispatch table (one dictionary look-up and one call per frame).
"""
