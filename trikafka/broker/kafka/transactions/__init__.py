"""The transaction coordinator of the Kafka listener (docs/protocol.md §19.5).

* ``machine``: one transactional id's state machine, sans I/O.
"""
