"""The trikafka broker: a Trio server speaking the Kafka 0.7 protocol (docs/protocol.md §2-§9)
and the Apache Kafka protocol (§16) on one engine.

``serve(config)`` runs one broker as a nursery tree (see ``server``);
``BrokerConfig`` holds its settings (``config``).  docs/architecture.md
shows the layers: ``engine/`` below the two listeners (``handlers.py`` and
``connection.py`` for 0.7, ``kafka/`` for Apache Kafka), ``replication/``
below them.
"""

from .config import BrokerConfig, ConfigError
from .server import Broker, serve

__all__ = ["Broker", "BrokerConfig", "ConfigError", "serve"]
