"""The Apache Kafka protocol, sans I/O (docs/protocol.md §16).

``batch``: v2 record batch headers: validation, offset assignment, the
recovery scan.  The codec of the records inside a batch, compression, the
api table over ``kio`` and request framing live beside it.
"""
