"""The trikafka broker: a Trio server speaking the Kafka 0.7 protocol (docs/protocol.md §2-§9).

``serve(config)`` runs one broker as a nursery tree (see ``server``);
``BrokerConfig`` holds its settings (``config``).
"""

from .config import BrokerConfig, ConfigError
from .server import Broker, serve

__all__ = ["Broker", "BrokerConfig", "ConfigError", "serve"]
