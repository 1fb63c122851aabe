"""The transaction coordinator of the Kafka listener (docs/protocol.md §19.5).

* ``machine``: one transactional id's state machine, sans I/O;
* ``state``: the ids of one loaded ``__transaction_state`` partition, sans I/O;
* ``placement``: ``__transaction_state``'s settings and an id's partition;
* ``coordinator``: the Trio coordinator: loading, acks -1 writes, markers, timeouts.
"""
