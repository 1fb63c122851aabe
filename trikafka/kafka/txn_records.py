"""The records of ``__transaction_state`` (docs/protocol.md §19.5.2), sans I/O.

Kafka's own layout (``TransactionLogKey`` v0, ``TransactionLogValue`` v0), so
Kafka's tools read what trikafka writes:

* key v0: ``transactional_id:string``;
* value v0: ``producer_id:int64 producer_epoch:int16 transaction_timeout_ms:int32
  state:int8 partitions:nullable array of (topic:string partition_ids:array of int32)
  last_update_timestamp_ms:int64 start_timestamp_ms:int64``.

A null value is a tombstone.  Anything that does not decode, and any other
version, raises ``TxnRecordError``.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from .errors import KafkaCodecError
from .group_records import FieldReader, write_string
KEY_VERSION = 0  # the one written and read
VALUE_VERSION = 0  # the one written and read
NO_TIMESTAMP = -1

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class TxnRecordError(KafkaCodecError):
    """A ``__transaction_state`` key or value that does not decode (§19.5.2)."""


class TxnState(enum.IntEnum):
    """A transactional id's state; the int is its code in the value record (§19.5.2)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The state's name as Kafka's admin apis spell it (``PrepareCommit``, §19.5.4)."""
        return "".join(word.capitalize() for word in self.name.split("_"))


def state_named(name: str) -> TxnState | None:
    """The state Kafka names ``name`` (``Ongoing``), None for a name that is no state."""
    return _BY_KAFKA_NAME.get(name)


_BY_KAFKA_NAME = {state.kafka_name: state for state in TxnState}


@dataclass(frozen=True, slots=True)
class TxnKey:
    """The key of a transactional id's state."""

    transactional_id: str


@dataclass(frozen=True, slots=True)
class TxnValue:
    """A transactional id's state as the log stores it; ``partitions`` sorted, no duplicates."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: tuple[tuple[str, int], ...] = ()
    last_update_timestamp_ms: int = NO_TIMESTAMP
    start_timestamp_ms: int = NO_TIMESTAMP

    def __post_init__(self) -> None:
        if list(self.partitions) != sorted(set(self.partitions)):
            raise TxnRecordError(f"transaction partitions not sorted or repeated: {self.partitions}")


def encode_key(key: TxnKey) -> bytes:
    """The record key of ``key``, version 0."""
    out = bytearray(_INT16.pack(KEY_VERSION))
    write_string(out, key.transactional_id, TxnRecordError)
    return bytes(out)


def encode_value(value: TxnValue | None) -> bytes | None:
    """The record value of ``value``, version 0; None (a tombstone) for None.

    No partitions are written as a null array, as Kafka writes an Empty state's."""
    if value is None:
        return None
    out = bytearray(_INT16.pack(VALUE_VERSION))
    out += _INT64.pack(value.producer_id)
    out += _INT16.pack(value.producer_epoch)
    out += _INT32.pack(value.timeout_ms)
    out += _INT8.pack(int(value.state))
    if not value.partitions:
        out += _INT32.pack(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in value.partitions:
            by_topic.setdefault(topic, []).append(partition)
        out += _INT32.pack(len(by_topic))
        for topic, ids in by_topic.items():
            write_string(out, topic, TxnRecordError)
            out += _INT32.pack(len(ids))
            for partition in ids:
                out += _INT32.pack(partition)
    out += _INT64.pack(value.last_update_timestamp_ms)
    out += _INT64.pack(value.start_timestamp_ms)
    return bytes(out)


def _version(reader: FieldReader, what: str, expected: int) -> None:
    version = reader.int16()
    if version != expected:
        raise TxnRecordError(f"{what} version {version}: only {expected} is read")


def decode_key(data: bytes) -> TxnKey:
    """A ``__transaction_state`` key, version 0."""
    reader = FieldReader(bytes(data), "__transaction_state key", TxnRecordError)
    _version(reader, "__transaction_state key", KEY_VERSION)
    key = TxnKey(reader.string())
    reader.done()
    return key


def _count(reader: FieldReader, what: str, nullable: bool) -> int:
    count = reader.int32()
    if count == -1 and nullable:
        return 0
    if count < 0:
        raise TxnRecordError(f"transaction state value: {count} {what}")
    return count


def decode_value(data: bytes) -> TxnValue:
    """A ``__transaction_state`` value, version 0."""
    what = "transaction state value"
    reader = FieldReader(bytes(data), what, TxnRecordError)
    _version(reader, what, VALUE_VERSION)
    producer_id = reader.int64()
    producer_epoch = reader.int16()
    timeout_ms = reader.int32()
    code = reader.int8()
    try:
        state = TxnState(code)
    except ValueError:
        raise TxnRecordError(f"{what}: state {code} is none of Kafka's 0-7") from None
    partitions: list[tuple[str, int]] = []
    for _ in range(_count(reader, "topics", nullable=True)):
        topic = reader.string()
        for _ in range(_count(reader, "partitions", nullable=False)):
            partitions.append((topic, reader.int32()))
    last_update_ms = reader.int64()
    start_ms = reader.int64()
    reader.done()
    return TxnValue(producer_id, producer_epoch, timeout_ms, state, tuple(sorted(set(partitions))),
                    last_update_ms, start_ms)


def decode_record(key: bytes, value: bytes | None) -> tuple[TxnKey, TxnValue | None]:
    """One record of ``__transaction_state``: its key and its value (None: a tombstone)."""
    decoded_key = decode_key(key)
    return decoded_key, None if value is None else decode_value(value)

