"""The Kafka 0.7 ZooKeeper registry layout (spec §8.1) and path validation.

Every registry path is built here, from validated components, so a topic or
group name can never smuggle a ``/`` into the tree.  Paths are relative to the
connect string's chroot (the coordinator applies it).
"""

from __future__ import annotations

import re

from trikafka.wire.topics import is_valid_topic

from .errors import InvalidPathError

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"

_PARTITION_NAME_RE = re.compile(r"(?:(0|[1-9][0-9]*)-)?(0|[1-9][0-9]*)")
# The broker part of a replicated partition's registry name: it has none, since its
# leader moves; the name is the plain partition number (docs/protocol.md §12.9).
REPLICATED_BROKER = None
_INT32_MAX = 2**31 - 1  # both parts are int32, as 0.7's Partition.parse reads them
# Characters ZooKeeper's PathUtils.validatePath refuses in a node name.
_FORBIDDEN_CHARS_RE = re.compile("[\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]")


# -- validation ---------------------------------------------------------------


def validate_path(path: str, *, allow_trailing_slash: bool = False) -> str:
    """Check an absolute znode path; returns it unchanged.

    ``allow_trailing_slash`` admits ``/parent/`` for sequential creates, where
    ZooKeeper appends the sequence number directly.

    Raises:
        InvalidPathError: not a str, relative, empty component, ``.``/``..``
            component, or a character ZooKeeper forbids.
    """
    if not isinstance(path, str):
        raise InvalidPathError(f"znode path must be str, got {type(path).__name__}")
    if not path.startswith("/"):
        raise InvalidPathError(f"znode path must be absolute: {path!r}")
    if path == "/":
        return path
    body = path[1:-1] if (allow_trailing_slash and path.endswith("/")) else path[1:]
    for component in body.split("/"):
        _check_node_name(component, path)
    return path


def _check_node_name(name: str, context: str) -> None:
    if name == "":
        raise InvalidPathError(f"empty node name in {context!r}")
    if name in (".", ".."):
        raise InvalidPathError(f"relative node name {name!r} in {context!r}")
    if _FORBIDDEN_CHARS_RE.search(name):
        raise InvalidPathError(f"forbidden character in {context!r}")


def validate_component(name: str, what: str = "name") -> str:
    """Check one path component (a group, consumer id, child name); returns it."""
    if not isinstance(name, str):
        raise InvalidPathError(f"{what} must be str, got {type(name).__name__}")
    if "/" in name:
        raise InvalidPathError(f"{what} must not contain '/': {name!r}")
    _check_node_name(name, name)
    return name


def validate_topic(topic: str) -> str:
    """Check a topic name against §9.7 (1-255 chars of ``[A-Za-z0-9._-]``)."""
    if not isinstance(topic, str):
        raise InvalidPathError(f"topic must be str, got {type(topic).__name__}")
    if not is_valid_topic(topic):  # the one rule, shared with the broker and the log
        raise InvalidPathError(f"invalid topic name {topic!r}")
    return topic


def validate_broker_id(broker_id: int) -> int:
    """Broker ids are non-negative ints, written in decimal without padding."""
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
        raise InvalidPathError(f"broker id must be a non-negative int, got {broker_id!r}")
    return broker_id


def _validate_partition(partition: int) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise InvalidPathError(f"partition must be a non-negative int, got {partition!r}")
    return partition


# -- brokers (§8.2) ---------------------------------------------------


def broker_ids() -> str:
    """``/brokers/ids``: children are the live broker ids."""
    return BROKER_IDS


def broker_id(broker_id: int) -> str:
    """``/brokers/ids/<id>``: ephemeral, value ``creator:host:port``."""
    return f"{BROKER_IDS}/{validate_broker_id(broker_id)}"


def broker_topics() -> str:
    """``/brokers/topics``: children are the registered topics."""
    return BROKER_TOPICS


def broker_topic(topic: str) -> str:
    """``/brokers/topics/<topic>``: persistent, empty; children are broker ids."""
    return f"{BROKER_TOPICS}/{validate_topic(topic)}"


def broker_topic_id(topic: str, broker_id: int) -> str:
    """``/brokers/topics/<topic>/<id>``: ephemeral, value = partition count."""
    return f"{broker_topic(topic)}/{validate_broker_id(broker_id)}"


# -- consumers (§8.3) --------------------------------------------------------


def consumer_group(group: str) -> str:
    """``/consumers/<group>``."""
    return f"{CONSUMERS}/{validate_component(group, 'group')}"


def consumer_ids(group: str) -> str:
    """``/consumers/<group>/ids``: children are the registered consumer ids."""
    return f"{consumer_group(group)}/ids"


def consumer_id(group: str, consumer: str) -> str:
    """``/consumers/<group>/ids/<consumerId>``: ephemeral, topic-count value."""
    return f"{consumer_ids(group)}/{validate_component(consumer, 'consumer id')}"


def consumer_owners(group: str, topic: str) -> str:
    """``/consumers/<group>/owners/<topic>``: children are ``<broker>-<partition>``."""
    return f"{consumer_group(group)}/owners/{validate_topic(topic)}"


def consumer_owner(group: str, topic: str, broker: int | None, partition: int) -> str:
    """``/consumers/<group>/owners/<topic>/<broker>-<partition>``: ephemeral thread id."""
    return f"{consumer_owners(group, topic)}/{partition_name(broker, partition)}"


def consumer_offsets(group: str, topic: str) -> str:
    """``/consumers/<group>/offsets/<topic>``."""
    return f"{consumer_group(group)}/offsets/{validate_topic(topic)}"


def consumer_offset(group: str, topic: str, broker: int | None, partition: int) -> str:
    """``/consumers/<group>/offsets/<topic>/<broker>-<partition>``: persistent decimal offset."""
    return f"{consumer_offsets(group, topic)}/{partition_name(broker, partition)}"


def partition_name(broker: int | None, partition: int) -> str:
    """The ``<brokerId>-<partition>`` child name used under owners and offsets.

    ``broker`` ``REPLICATED_BROKER`` names a partition of a replicated topic: ``<partition>``.
    """
    if broker is REPLICATED_BROKER:
        return str(_validate_partition(partition))
    return f"{validate_broker_id(broker)}-{_validate_partition(partition)}"


def parse_partition_name(name: str) -> tuple[int | None, int]:
    """Inverse of :func:`partition_name` (``(REPLICATED_BROKER, p)`` for a plain ``<p>``);
    raises InvalidPathError on anything else."""
    match = _PARTITION_NAME_RE.fullmatch(name) if isinstance(name, str) else None
    broker = None if match is None or match.group(1) is None else int(match.group(1))
    if match is None or max(broker or 0, int(match.group(2))) > _INT32_MAX:
        raise InvalidPathError(f"not a <broker>-<partition> or <partition> name: {name!r}")
    return broker, int(match.group(2))


def join(parent: str, child: str) -> str:
    """``parent/child`` for a validated absolute parent and one child component."""
    validate_path(parent)
    validate_component(child, "child")
    return f"{parent}/{child}" if parent != "/" else f"/{child}"


def parent_of(path: str) -> str:
    """The parent of an absolute, non-root path."""
    validate_path(path)
    if path == "/":
        raise InvalidPathError("the root has no parent")
    head = path.rsplit("/", 1)[0]
    return head or "/"


# -- replicated topics (trikafka only; 0.7 clients never read this tree) ------

TRIKAFKA = "/trikafka"
REPLICATED_TOPICS = "/trikafka/topics"
CONTROLLER = "/trikafka/controller"
CONTROLLER_EPOCH = "/trikafka/controller_epoch"
REPLICATION_BROKERS = "/trikafka/brokers"
SHUTTING_DOWN = "/trikafka/shutting_down"
UNCLEAN_ELECTIONS = "/trikafka/unclean_elections"  # ElectLeaders' unclean requests (docs: §12.2, §12.7)
TOPIC_CONFIGS = "/trikafka/config/topics"
KAFKA_GROUPS = "/trikafka/kafka-groups"
PRODUCER_IDS = "/trikafka/producer-ids"  # the next free block of producer ids (docs: §19.1)
ACLS = "/trikafka/acls"  # the Kafka listener's ACLs, one JSON list (docs: §18.3)
USER_CONFIGS = "/trikafka/config/users"


def replicated_topic(topic: str) -> str:
    """``/trikafka/topics/<t>``: the assignment and settings of a replicated topic."""
    return f"{REPLICATED_TOPICS}/{validate_topic(topic)}"


def partition_state(topic: str, partition: int) -> str:
    """``/trikafka/topics/<t>/partitions/<p>/state``: leader, leader epoch, ISR."""
    return f"{replicated_topic(topic)}/partitions/{_validate_partition(partition)}/state"


def replication_broker(broker_id: int) -> str:
    """``/trikafka/brokers/<id>``: host, port and whether the unflushed tail survived."""
    return f"{REPLICATION_BROKERS}/{validate_broker_id(broker_id)}"


def shutting_down(broker_id: int) -> str:
    """``/trikafka/shutting_down/<id>``: the broker asks for a controlled shutdown."""
    return f"{SHUTTING_DOWN}/{validate_broker_id(broker_id)}"


def unclean_election(topic: str, partition: int) -> str:
    """``/trikafka/unclean_elections/<t>-<p>``: an unclean election asked for (docs: §12.7)."""
    return f"{UNCLEAN_ELECTIONS}/{validate_topic(topic)}-{_validate_partition(partition)}"


def parse_unclean_election(name: str) -> tuple[str, int] | None:
    """The partition a child of ``UNCLEAN_ELECTIONS`` names (split at the last hyphen); None if none."""
    topic, _, partition = name.rpartition("-")
    return (topic, int(partition)) if topic and partition.isdigit() else None


def topic_config(topic: str) -> str:
    """``/trikafka/config/topics/<t>``: the settings of a plain (unreplicated) topic (docs: §12.12.1)."""
    return f"{TOPIC_CONFIGS}/{validate_topic(topic)}"


def kafka_group(group: str) -> str:
    """``/trikafka/kafka-groups/<g>``: ephemeral while Kafka group ``<g>`` has members (docs: §17.7)."""
    return f"{KAFKA_GROUPS}/{validate_component(group, 'group')}"


def user_config(name: str) -> str:
    """``/trikafka/config/users/<name>``: one SASL user's salted credentials (docs: §18.2)."""
    return f"{USER_CONFIGS}/{validate_component(name, 'user name')}"


# -- Kafka's entity configs (docs: §20.1), at Kafka's own paths outside trikafka's tree ----

ENTITY_CONFIGS = "/config"
ENTITY_CONFIG_CHANGES = "/config/changes"
ENTITY_CONFIG_CHANGE_PREFIX = "config_change_"  # a sequential child of ENTITY_CONFIG_CHANGES


def entity_config(entity_path: str) -> str:
    """``/config/<entity path>`` (``users/<u>``, ``clients/<c>``, ``users/<u>/clients/<c>``), each
    name already sanitized (URL-encoded, so it holds no ``/``)."""
    return validate_path(f"{ENTITY_CONFIGS}/{entity_path}")
