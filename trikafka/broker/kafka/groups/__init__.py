"""The group coordinator of the Kafka listener (docs/protocol.md §17).

* ``placement``: ``__consumer_offsets`` (creating it, a group's partition, its coordinator);
* ``state``: the groups of one loaded partition, sans I/O;
* ``store``: writing records to ``__consumer_offsets`` and reading a partition back;
* ``coordinator``: which partitions this broker serves, loading them;
* ``offsets_api``: FindCoordinator, OffsetCommit, OffsetFetch;
* ``txn_offsets``: offsets of open transactions, pending until their marker (§19.5.4).
* ``consumer_group``, ``assignors``, ``consumer_api``: Kafka 4's consumer groups (KIP-848, §17.9):
  the state machine, its server-side assignors, ConsumerGroupHeartbeat and ConsumerGroupDescribe.
"""
