"""The Apache Kafka protocol listener (docs/protocol.md §16), on the broker's engine (``broker/engine/``).

``connection``: one client connection (frames in, answers out in order);
``service``: the per-broker state the apis share and the table of handlers;
one module per family of apis: ``produce``, ``fetch``, ``offsets``,
``cluster`` (ApiVersions, Metadata, DescribeCluster) and ``topics``
(CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs).
"""
