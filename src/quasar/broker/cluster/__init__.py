"""A broker as a member of a cluster: registration and live view of the brokers (``membership``), topic
placement on broker groups (``placement``), lookup answers and ownership checks (``ownership``), composed by
``member`` (DESIGN.md "Cluster"; reference/cluster.md §5-6)."""
