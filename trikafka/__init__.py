"""trikafka: the Kafka 0.7 design rebuilt in Python on Trio."""

__version__ = "0.1.0"
