"""Names on disk: topics (spec §9.7), partition directories and segment files (§7.1)."""

from __future__ import annotations

import re

from trikafka.wire.topics import is_valid_topic

from .errors import InvalidTopicError, LogLoadError

SEGMENT_SUFFIX = ".kafka"
# A cleaned segment's padding runs (docs/protocol.md §11.4.2); 0.7 ignores it.
PADDING_SUFFIX = ".padding"
CLEANED_SUFFIX = ".cleaned"  # being written by the cleaner; swept at load
SWAP_SUFFIX = ".swap"  # a complete cleaned segment: load finishes its swap
SEGMENT_NAME_DIGITS = 20
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
# The machine's boot id at the broker's last start (replication: was the page cache lost?).
BOOT_ID_FILE = ".trikafka-boot-id"
# Present while this broker's replicas may lack bytes a reboot took (docs/protocol.md §12.2).
TAIL_LOST_FILE = ".trikafka-tail-lost"
# A standalone broker's per-topic settings (docs/protocol.md §9.5), and its temporary twin.
TOPIC_SETTINGS_FILE = ".trikafka-topic-settings.json"
# A partition directory's record format (docs/protocol.md §16.6): absent for 0.7, ``v2\n`` for Kafka's batches.
FORMAT_FILE = ".trikafka-format"
# Where the broker serving the directory listens (docs/protocol.md §7.1), for the client commands.
LISTENER_FILE = ".trikafka-listener"
# A standalone broker's SASL users (docs/protocol.md §18.2), written by `trikafka users`.
USERS_FILE = ".trikafka-users.json"
# A standalone broker's ACLs (docs/protocol.md §18.3), written by `trikafka acls`.
ACL_FILE = ".trikafka-acls.json"
# The files the broker and its commands keep beside the partition directories, each with the
# temporary twin it is written through: the log dir's loader passes them over without a warning.
BROKER_FILES = frozenset(
    name + suffix
    for name in (CLEAN_SHUTDOWN_MARKER, BOOT_ID_FILE, TAIL_LOST_FILE, TOPIC_SETTINGS_FILE, LISTENER_FILE, USERS_FILE,
                 ACL_FILE)
    for suffix in ("", ".tmp"))
# Leftovers of interrupted file operations (ours or a modern Kafka's); swept at load.
TEMPORARY_SUFFIXES = (".tmp", ".deleted", ".cleaned", ".swap")

_SEGMENT_RE = re.compile(r"[0-9]{%d}\.kafka" % SEGMENT_NAME_DIGITS)
_PARTITION_RE = re.compile(r"0|[1-9][0-9]{0,9}")


def validate_topic(name: object) -> None:
    """Raise ``InvalidTopicError`` unless ``name`` is a topic trikafka accepts.

    The rule is ``trikafka.wire.is_valid_topic`` (§9.7).
    """
    if not is_valid_topic(name):
        raise InvalidTopicError(f"invalid topic name {_shorten(name)}")


def partition_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>``, the directory of one topic-partition."""
    assert partition >= 0, partition
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """Split a partition directory name at its last ``-`` (spec §7.1).

    Raises ``LogLoadError`` for a name that is not ``<valid topic>-<partition>``
    with the partition in canonical decimal form (``t-01`` would alias ``t-1``).
    """
    topic, dash, suffix = name.rpartition("-")
    if not dash or _PARTITION_RE.fullmatch(suffix) is None:
        raise LogLoadError(f"directory {name!r} in the log dir is not named <topic>-<partition>")
    try:
        validate_topic(topic)
    except InvalidTopicError as exc:
        raise LogLoadError(f"directory {name!r} in the log dir: {exc}") from None
    return topic, int(suffix)


def segment_file_name(start_offset: int) -> str:
    """The file name of the segment starting at ``start_offset``: 20 digits + ``.kafka``."""
    assert 0 <= start_offset < 10**SEGMENT_NAME_DIGITS, start_offset
    return f"{start_offset:0{SEGMENT_NAME_DIGITS}d}{SEGMENT_SUFFIX}"


def parse_segment_file_name(name: str) -> int:
    """Start offset of a segment file name; ``LogLoadError`` if the name is malformed."""
    if _SEGMENT_RE.fullmatch(name) is None:
        raise LogLoadError(f"segment file {name!r} is not named <20 decimal digits>{SEGMENT_SUFFIX}")
    return int(name[:SEGMENT_NAME_DIGITS])


def padding_file_name(start_offset: int) -> str:
    """The padding index beside the segment starting at ``start_offset``."""
    return segment_file_name(start_offset)[:-len(SEGMENT_SUFFIX)] + PADDING_SUFFIX


def is_temporary_file_name(name: str) -> bool:
    """True for leftovers of interrupted operations, which load sweeps away."""
    return name.endswith(TEMPORARY_SUFFIXES)


def _shorten(name: object, limit: int = 60) -> str:
    text = repr(name)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(name) if isinstance(name, str) else '?'} chars)"
