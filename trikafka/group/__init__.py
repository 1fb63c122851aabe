"""Consumer groups: the ZooKeeper-balanced group consumer and its pure parts.

* :class:`GroupConsumer` / :class:`GroupConfig` / :class:`GroupMessage`: the consumer.
* :mod:`trikafka.group.assign`: the §8.3 assignment as pure functions.
* :mod:`trikafka.group.registry`: codecs for the ``/consumers`` znodes, topic filters.
* :mod:`trikafka.group.inspect`: a group's members, owners, offsets and lag.
"""

from .assign import assign_group, consumer_assignment, partition_owners
from .config import GroupConfig, group_config_from_properties
from .batches import GroupBatch
from .consumer import GroupConsumer, GroupMessage
from .errors import ConsumerIdTakenOver, ConsumerTimeout, KafkaGroupClash, RebalanceFailedError
from .registry import TopicFilter, blacklist, whitelist

__all__ = [
    "ConsumerIdTakenOver", "ConsumerTimeout", "GroupBatch", "GroupConfig", "GroupConsumer", "GroupMessage",
    "KafkaGroupClash",
    "RebalanceFailedError",
    "TopicFilter", "assign_group", "blacklist", "consumer_assignment", "group_config_from_properties",
    "partition_owners", "whitelist",
]
