"""The records of ``__consumer_offsets`` (docs/protocol.md §17.2), sans I/O.

Kafka's own layout, so Kafka's tools read what trikafka writes: a key and a
value, each starting with a version ``int16``; strings are ``int16`` length
and UTF-8 (-1: null), bytes ``int32`` length and bytes.

* offset commit: key v0/v1 ``group topic partition:int32``; value v0-v3
  (v3 written: ``offset:int64 leader_epoch:int32 metadata commit_timestamp:int64``);
* group metadata: key v2 ``group``; value v0-v3 (v3 written, see ``GroupValue``);
* Kafka 4's consumer groups (KIP-848, §17.9): keys v3, v5-v8 (``ConsumerKey``), values
  version 0 in flexible encoding (``EpochValue``, ``MemberMetadataValue``, ``TargetValue``,
  ``CurrentAssignmentValue``); keys v4 and v16 (Kafka 4.0's partition metadata and regular
  expressions) are read and ignored.

A null value is a tombstone.  Anything that does not decode raises
``GroupRecordError``.
"""

from __future__ import annotations

import enum
import struct
import uuid
from dataclasses import dataclass, field

from .errors import KafkaCodecError
from .varint import read_uvarint, write_uvarint

OFFSETS_TOPIC = "__consumer_offsets"  # the topic these records live in (§17.1)
TRANSACTION_STATE_TOPIC = "__transaction_state"  # the transaction coordinator's topic (§19.5.1, txn_records)
# Topics a broker creates and keeps itself (§17.1, §19.5.1): clients read them, never write, create or change them.
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
OFFSET_KEY_VERSIONS = (0, 1)
OFFSET_KEY_VERSION = 1  # the one written
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3  # the one written; 0-3 are read
GROUP_VALUE_VERSION = 3  # the one written; 0-3 are read
NO_TIMESTAMP = -1
NO_LEADER_EPOCH = -1

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class GroupRecordError(KafkaCodecError):
    """A ``__consumer_offsets`` key or value that does not decode (§17.2)."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    """The key of a committed offset: (group, topic, partition)."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    """The key of a group's metadata."""

    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    """A committed offset; ``expire_timestamp_ms`` exists only in value v1 (-1 elsewhere)."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp_ms: int = NO_TIMESTAMP
    expire_timestamp_ms: int = NO_TIMESTAMP


@dataclass(frozen=True, slots=True)
class MemberValue:
    """One member as a group's metadata stores it (v0 lacks the instance id and rebalance timeout)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    """A group's metadata: its generation, chosen protocol, leader and members."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int = NO_TIMESTAMP
    members: tuple[MemberValue, ...] = field(default=())


class ConsumerRecord(enum.IntEnum):
    """A consumer group's record types (§17.9); the int is the key's version."""

    GROUP_METADATA = 3
    PARTITION_METADATA = 4  # Kafka 4.0's; read and ignored
    MEMBER_METADATA = 5
    TARGET_METADATA = 6
    TARGET_MEMBER = 7
    CURRENT_ASSIGNMENT = 8
    REGULAR_EXPRESSION = 16  # Kafka 4.0's resolved regular expressions; read and ignored


class MemberState(enum.IntEnum):
    """Kafka's consumer group member states (§17.9); the int is the current assignment record's."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2


# The record types whose key names a member; the others name only the group.
_MEMBER_KEYED = frozenset({ConsumerRecord.MEMBER_METADATA, ConsumerRecord.TARGET_MEMBER,
                           ConsumerRecord.CURRENT_ASSIGNMENT})
_CONSUMER_KEY_VERSIONS = frozenset(int(kind) for kind in ConsumerRecord)
_MEMBER_STATES = frozenset(int(state) for state in MemberState)
IGNORED_CONSUMER_RECORDS = frozenset({ConsumerRecord.PARTITION_METADATA, ConsumerRecord.REGULAR_EXPRESSION})
CONSUMER_VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    """The key of a consumer group's record (§17.9): its type, the group, and the member (or "");
    ``extra`` is the regular expression of a key v16."""

    kind: ConsumerRecord
    group: str
    member_id: str = ""
    extra: str = ""


# Partitions by topic id, sorted: how the records and the protocol name an assignment.
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class EpochValue:
    """The group epoch (group metadata) or the assignment epoch (target metadata)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    """A consumer group member's metadata (§17.9)."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class TargetValue:
    """A member's target assignment."""

    partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    """A member's current assignment: its epochs, state, owned and pending-revocation partitions."""

    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: TopicPartitions
    pending_revocation: TopicPartitions


@dataclass(frozen=True, slots=True)
class IgnoredValue:
    """The value of a record type read and ignored (Kafka 4.0's partition metadata, regexes)."""


ConsumerValue = EpochValue | MemberMetadataValue | TargetValue | CurrentAssignmentValue | IgnoredValue
RecordKey = OffsetKey | GroupKey | ConsumerKey
RecordValue = OffsetValue | GroupValue | ConsumerValue


# ----------------------------------------------------------------- encoding

def write_string(out: bytearray, text: str | None, error: type[KafkaCodecError] = GroupRecordError) -> None:
    """Append ``text`` as an ``int16`` length and UTF-8 (-1: None); too long raises ``error``."""
    if text is None:
        out += _INT16.pack(-1)
        return
    raw = text.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise error(f"a string of {len(raw)} bytes does not fit an int16 length")
    out += _INT16.pack(len(raw))
    out += raw


def _bytes(out: bytearray, data: bytes) -> None:
    out += _INT32.pack(len(data))
    out += data


def encode_key(key: RecordKey) -> bytes:
    """The record key of ``key``, at the version the broker writes."""
    out = bytearray()
    if isinstance(key, ConsumerKey):
        out += _INT16.pack(key.kind)
        write_string(out, key.group)
        if key.kind in _MEMBER_KEYED:
            write_string(out, key.member_id)
        elif key.kind is ConsumerRecord.REGULAR_EXPRESSION:
            write_string(out, key.extra)
    elif isinstance(key, OffsetKey):
        out += _INT16.pack(OFFSET_KEY_VERSION)
        write_string(out, key.group)
        write_string(out, key.topic)
        out += _INT32.pack(key.partition)
    else:
        out += _INT16.pack(GROUP_KEY_VERSION)
        write_string(out, key.group)
    return bytes(out)


def encode_offset_value(value: OffsetValue) -> bytes:
    """An offset-commit value, version 3."""
    out = bytearray(_INT16.pack(OFFSET_VALUE_VERSION))
    out += _INT64.pack(value.offset)
    out += _INT32.pack(value.leader_epoch)
    write_string(out, value.metadata)
    out += _INT64.pack(value.commit_timestamp_ms)
    return bytes(out)


def encode_group_value(value: GroupValue) -> bytes:
    """A group-metadata value, version 3."""
    out = bytearray(_INT16.pack(GROUP_VALUE_VERSION))
    write_string(out, value.protocol_type)
    out += _INT32.pack(value.generation)
    write_string(out, value.protocol)
    write_string(out, value.leader)
    out += _INT64.pack(value.current_state_timestamp_ms)
    out += _INT32.pack(len(value.members))
    for member in value.members:
        write_string(out, member.member_id)
        write_string(out, member.group_instance_id)
        write_string(out, member.client_id)
        write_string(out, member.client_host)
        out += _INT32.pack(member.rebalance_timeout_ms)
        out += _INT32.pack(member.session_timeout_ms)
        _bytes(out, member.subscription)
        _bytes(out, member.assignment)
    return bytes(out)


def _compact_string(out: bytearray, text: str | None) -> None:
    if text is None:
        write_uvarint(out, 0)
        return
    raw = text.encode("utf-8")
    write_uvarint(out, len(raw) + 1)
    out += raw


def _topic_partitions(out: bytearray, partitions: TopicPartitions) -> None:
    write_uvarint(out, len(partitions) + 1)
    for topic_id, indexes in partitions:
        out += topic_id.bytes
        write_uvarint(out, len(indexes) + 1)
        for index in indexes:
            out += _INT32.pack(index)
        write_uvarint(out, 0)  # the struct's tagged fields: none


def encode_consumer_value(value: ConsumerValue) -> bytes:
    """A consumer group record's value, version 0, flexible (§17.9)."""
    out = bytearray(_INT16.pack(CONSUMER_VALUE_VERSION))
    if isinstance(value, EpochValue):
        out += _INT32.pack(value.epoch)
    elif isinstance(value, MemberMetadataValue):
        _compact_string(out, value.instance_id)
        _compact_string(out, value.rack_id)
        _compact_string(out, value.client_id)
        _compact_string(out, value.client_host)
        write_uvarint(out, len(value.subscribed_topic_names) + 1)
        for name in value.subscribed_topic_names:
            _compact_string(out, name)
        _compact_string(out, value.subscribed_topic_regex)
        out += _INT32.pack(value.rebalance_timeout_ms)
        _compact_string(out, value.server_assignor)
    elif isinstance(value, TargetValue):
        _topic_partitions(out, value.partitions)
    elif isinstance(value, CurrentAssignmentValue):
        out += _INT32.pack(value.member_epoch)
        out += _INT32.pack(value.previous_member_epoch)
        out += _INT8.pack(value.state)
        _topic_partitions(out, value.assigned)
        _topic_partitions(out, value.pending_revocation)
    else:
        raise GroupRecordError("an ignored record type is never written")
    write_uvarint(out, 0)  # the value's tagged fields: none
    return bytes(out)


def encode_value(value: RecordValue | None) -> bytes | None:
    """The record value of ``value``; None (a tombstone) for None."""
    if value is None:
        return None
    if isinstance(value, OffsetValue):
        return encode_offset_value(value)
    if isinstance(value, GroupValue):
        return encode_group_value(value)
    return encode_consumer_value(value)


# ----------------------------------------------------------------- decoding

class FieldReader:
    """Reads the fields of one key or value of an internal topic (§17.2, §19.5.2); running short or
    leaving bytes raises ``error``."""

    __slots__ = ("_data", "_pos", "_what", "_error")

    def __init__(self, data: bytes, what: str, error: type[KafkaCodecError] = GroupRecordError):
        self._data = data
        self._pos = 0
        self._what = what
        self._error = error

    def _take(self, n: int) -> int:
        start = self._pos
        if n < 0 or start + n > len(self._data):
            raise self._error(f"{self._what}: {len(self._data)} bytes end inside a field at {start}")
        self._pos = start + n
        return start

    def int8(self) -> int:
        return int(_INT8.unpack_from(self._data, self._take(1))[0])

    def int16(self) -> int:
        return int(_INT16.unpack_from(self._data, self._take(2))[0])

    def int32(self) -> int:
        return int(_INT32.unpack_from(self._data, self._take(4))[0])

    def int64(self) -> int:
        return int(_INT64.unpack_from(self._data, self._take(8))[0])

    def _utf8(self, length: int) -> str | None:
        """The next ``length`` bytes as UTF-8; None for length -1 (a null string)."""
        if length == -1:
            return None
        start = self._take(length)
        try:
            return self._data[start:start + length].decode("utf-8")
        except UnicodeDecodeError:
            raise self._error(f"{self._what}: a string at {start} is not UTF-8") from None

    def _required(self, text: str | None) -> str:
        if text is None:
            raise self._error(f"{self._what}: a null string where the schema has none")
        return text

    def nullable_string(self) -> str | None:
        return self._utf8(self.int16())

    def string(self) -> str:
        return self._required(self.nullable_string())

    def bytes_(self) -> bytes:
        length = self.int32()
        start = self._take(length)
        return bytes(self._data[start:start + length])

    def uvarint(self) -> int:
        try:
            value, end = read_uvarint(self._data, self._pos)
        except KafkaCodecError as exc:
            raise self._error(f"{self._what}: {exc}") from None
        self._pos = end
        return value

    def compact_nullable_string(self) -> str | None:
        return self._utf8(self.uvarint() - 1)

    def compact_string(self) -> str:
        return self._required(self.compact_nullable_string())

    def compact_count(self) -> int:
        """A compact array's length (a null array reads as empty)."""
        return max(self.uvarint() - 1, 0)

    def uuid(self) -> uuid.UUID:
        start = self._take(16)
        return uuid.UUID(bytes=bytes(self._data[start:start + 16]))

    def skip_tagged_fields(self) -> None:
        """Skip a flexible struct's tagged fields (each: tag, size, bytes)."""
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())

    def done(self) -> None:
        if self._pos != len(self._data):
            raise self._error(f"{self._what}: {len(self._data) - self._pos} bytes after the last field")


def decode_key(data: bytes) -> RecordKey:
    """An offset-commit key (v0, v1), a group-metadata key (v2) or a consumer group's (§17.9)."""
    reader = FieldReader(bytes(data), "__consumer_offsets key")
    version = reader.int16()
    key: RecordKey
    if version in OFFSET_KEY_VERSIONS:
        key = OffsetKey(reader.string(), reader.string(), reader.int32())
    elif version == GROUP_KEY_VERSION:
        key = GroupKey(reader.string())
    elif version in _CONSUMER_KEY_VERSIONS:
        kind = ConsumerRecord(version)
        group = reader.string()
        member_id = reader.string() if kind in _MEMBER_KEYED else ""
        extra = reader.string() if kind is ConsumerRecord.REGULAR_EXPRESSION else ""
        key = ConsumerKey(kind, group, member_id, extra)
    else:
        raise GroupRecordError(f"__consumer_offsets key version {version}: 0-8 and 16 are read, "
                               f"not share or streams groups' records")
    reader.done()
    return key


def _value_reader(data: bytes, what: str, newest: int) -> tuple[FieldReader, int]:
    """A reader past a value's version, which must be 0..``newest``."""
    reader = FieldReader(bytes(data), what)
    version = reader.int16()
    if not 0 <= version <= newest:
        raise GroupRecordError(f"{what} version {version}: 0-{newest} are read")
    return reader, version


def decode_offset_value(data: bytes) -> OffsetValue:
    """An offset-commit value of version 0-3 (missing fields take Kafka's defaults)."""
    reader, version = _value_reader(data, "offset commit value", OFFSET_VALUE_VERSION)
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = reader.string()
    commit_timestamp_ms = reader.int64()
    expire_timestamp_ms = reader.int64() if version == 1 else NO_TIMESTAMP
    reader.done()
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp_ms, expire_timestamp_ms)


def decode_group_value(data: bytes) -> GroupValue:
    """A group-metadata value of version 0-3 (missing fields take Kafka's defaults)."""
    reader, version = _value_reader(data, "group metadata value", GROUP_VALUE_VERSION)
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    timestamp_ms = reader.int64() if version >= 2 else NO_TIMESTAMP
    count = reader.int32()
    if count < 0:
        raise GroupRecordError(f"group metadata value: {count} members")
    members = []
    for _ in range(count):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        rebalance_timeout_ms = reader.int32() if version >= 1 else None
        session_timeout_ms = reader.int32()
        members.append(MemberValue(member_id, instance_id, client_id, client_host,
                                   session_timeout_ms if rebalance_timeout_ms is None else rebalance_timeout_ms,
                                   session_timeout_ms, reader.bytes_(), reader.bytes_()))
    reader.done()
    return GroupValue(protocol_type, generation, protocol, leader, timestamp_ms, tuple(members))


def _read_topic_partitions(reader: FieldReader) -> TopicPartitions:
    topics = []
    for _ in range(reader.compact_count()):
        topic_id = reader.uuid()
        indexes = tuple(reader.int32() for _ in range(reader.compact_count()))
        reader.skip_tagged_fields()
        topics.append((topic_id, indexes))
    return tuple(topics)


def decode_consumer_value(kind: ConsumerRecord, data: bytes) -> ConsumerValue:
    """A consumer group record's value of version 0 (§17.9); tagged fields are skipped."""
    if kind in IGNORED_CONSUMER_RECORDS:
        return IgnoredValue()
    what = f"consumer group record {kind.name.lower()} value"
    reader, _ = _value_reader(data, what, CONSUMER_VALUE_VERSION)
    value: ConsumerValue
    if kind in (ConsumerRecord.GROUP_METADATA, ConsumerRecord.TARGET_METADATA):
        value = EpochValue(reader.int32())
    elif kind is ConsumerRecord.MEMBER_METADATA:
        instance_id = reader.compact_nullable_string()
        rack_id = reader.compact_nullable_string()
        client_id = reader.compact_string()
        client_host = reader.compact_string()
        names = tuple(reader.compact_string() for _ in range(reader.compact_count()))
        value = MemberMetadataValue(instance_id, rack_id, client_id, client_host, names,
                                    reader.compact_nullable_string(), reader.int32(),
                                    reader.compact_nullable_string())
    elif kind is ConsumerRecord.TARGET_MEMBER:
        value = TargetValue(_read_topic_partitions(reader))
    else:
        epoch, previous, state = reader.int32(), reader.int32(), reader.int8()
        if state not in _MEMBER_STATES:
            raise GroupRecordError(f"{what}: member state {state}, not one of {sorted(_MEMBER_STATES)}")
        value = CurrentAssignmentValue(epoch, previous, MemberState(state), _read_topic_partitions(reader),
                                       _read_topic_partitions(reader))
    reader.skip_tagged_fields()
    reader.done()
    return value


def decode_record(key: bytes, value: bytes | None) -> tuple[RecordKey, RecordValue | None]:
    """One record of ``__consumer_offsets``: its key and its value (None: a tombstone)."""
    decoded_key = decode_key(key)
    if value is None:
        return decoded_key, None
    if isinstance(decoded_key, OffsetKey):
        return decoded_key, decode_offset_value(value)
    if isinstance(decoded_key, ConsumerKey):
        return decoded_key, decode_consumer_value(decoded_key.kind, value)
    return decoded_key, decode_group_value(value)
