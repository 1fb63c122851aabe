"""Where a broker listens unless told otherwise, and where clients look for one.

Its own module without imports, so that a command that only needs the defaults (the ``trikafka``
command's option help) does not import the broker's settings.
"""

DEFAULT_PORT = 9092  # the shipped server.properties and both Python clients (spec §14.1) [T]
DEFAULT_HOST = "127.0.0.1"  # loopback unless told otherwise [T]
DEFAULT_KAFKA_PORT = 9093  # the Kafka listener beside the default 0.7 port (docs/protocol.md §16.1) [T]
