"""The Apache Kafka protocol, sans I/O (docs/protocol.md §16).

``apis``: the api table of §16.3 and the ``kio`` classes of each version.
``framing``: frames, request and response headers (§16.2), both sides.
``fetch``: the Fetch response written by hand, records as sendfile chunks.
``batch``: v2 record batch headers: validation, offset assignment, the
recovery scan.  ``records``: the records inside a batch (build, decode);
``compression``: their codecs, bounded.  ``varint``: Kafka's
variable-length integers.  ``errors``:
the codec's one exception family, ``KafkaCodecError``.
"""
