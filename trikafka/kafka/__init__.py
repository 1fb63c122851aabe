"""The Apache Kafka protocol, sans I/O (docs/protocol.md §16).

``apis``: the api table of §16.3 and the ``kio`` classes of each version.
``batch``: v2 record batch headers: validation, offset assignment, the
recovery scan.  The codec of the records inside a batch, compression and
request framing live beside them.
"""
