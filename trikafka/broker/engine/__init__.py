"""The broker's engine: what both listeners, replication and the coordinators share.

Below the 0.7 listener (``broker/handlers.py``, ``broker/connection.py``) and
the Apache Kafka listener (``broker/kafka/``), beside replication
(``broker/replication/``): the partitions and the directory that finds them
(``partition.py``, ``directory.py``), the wake-ups on a partition's progress
(``waiters.py``), topic lifecycle and the metadata view (``topic_admin.py``),
and ``Engine`` (``engine.py``), the one object a listener is given.  Nothing
here imports a listener (``tests/unit/test_import_rules.py``).
"""
