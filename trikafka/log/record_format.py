"""The two record formats a log may hold, as one table (docs/protocol.md §3, §7.3, §16.6).

A partition directory holds 0.7 message sets (no ``FORMAT_FILE``) or Apache
Kafka's v2 record batches (``FORMAT_FILE`` holding ``v2``).  Everything the
log does differently for the two goes through the directory's
``RecordFormat``: how an append is checked (and, for v2, numbered), how
crash recovery scans a segment, and how many bytes an entry spans.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Callable

from trikafka.kafka import batch
from trikafka.kafka.batch import BatchHeader
from trikafka.wire import messageset

from .errors import LogLoadError, WrongFormatError
from .fs import FileSystem
from .verification_guard import VerificationGuard
from .names import FORMAT_FILE

Buffer = bytes | bytearray | memoryview

_INT32 = struct.Struct(">i")
_MIN_07_ENTRY_BYTES = 4 + 5  # length, then at least magic and CRC


@dataclass(frozen=True, slots=True)
class OffsetAssignment:
    """How the leader numbers the batches it appends to a v2 log (docs/protocol.md §16.6).

    ``append_time_ms``: the LogAppendTime to stamp, or None to keep the
    producer's timestamps (CreateTime).  ``transactional`` and ``markers``
    admit a verified transaction's batches and the leader's own markers;
    ``guard``: the verification guard a batch opening a transaction presents
    (§19.5.7).
    """

    leader_epoch: int
    append_time_ms: int | None = None
    transactional: bool = False  # the coordinator verified the transaction (§19.6)
    markers: bool = False  # the leader's own transaction markers (§19.6)
    guard: VerificationGuard | None = None


# What of an append's data goes to the segment, checked (and numbered) by its format:
# (valid_bytes, message_count, batches).  ``batches``: for v2, the headers of the batches as
# they are written (positions relative to the data); empty for 0.7.  A plain tuple, unpacked by
# ``Log.append``, its one reader: every append makes one, and a NamedTuple costs 0.15 us to build.
PreparedAppend = tuple[int, int, list[BatchHeader]]


@dataclass(frozen=True, slots=True)
class RecordFormat:
    """One record format: its name, its ``FORMAT_FILE`` text, its append check and its recovery scan.

    ``prepare(data, max_message_bytes, next_offset, assign)`` raises the
    format's validation error and changes nothing unless every entry passes;
    a v2 leader's ``assign`` rewrites the batches of ``data`` (a bytearray)
    in place.  ``entry_bytes(prefix)``: the size of the entry whose first
    ``prefix_bytes`` bytes are ``prefix``, or None if they cannot start one.
    """

    name: str
    file_text: bytes | None  # FORMAT_FILE's contents; None: the directory has no such file
    logical_offsets: bool  # the log numbers its records 0, 1, 2, ... and keeps batch indexes (v2)
    prefix_bytes: int
    entry_bytes: Callable[[bytes], int | None]  # recovery hands both functions what it read
    scan_valid_prefix: Callable[[bytes], int]
    prepare: Callable[[Buffer, int, int, OffsetAssignment | None], PreparedAppend]


def _prepare_07(data: Buffer, max_message_bytes: int, next_offset: int,
                assign: OffsetAssignment | None) -> PreparedAppend:
    """0.7: ``check_message_set``; a truncated trailing entry is dropped (docs/protocol.md §5.1)."""
    if assign is not None:
        raise WrongFormatError("a 0.7 log numbers no batches: an OffsetAssignment is for Kafka-format logs")
    valid_bytes, message_count = messageset.check_message_set(data, max_message_bytes)
    return valid_bytes, message_count, []


def _prepare_v2(data: Buffer, max_message_bytes: int, next_offset: int,
                assign: OffsetAssignment | None) -> PreparedAppend:
    """v2: every batch passes ``validate_batches``; the leader numbers them, a follower's must follow on.

    The leader's part must be whole batches (a cut batch is ``CORRUPT``).  A
    follower's bytes come from a byte-range fetch that may end inside a batch:
    as 0.7 drops a truncated trailing entry, the cut trailing batch is dropped.
    """
    if assign is not None:
        if not isinstance(data, bytearray):
            raise TypeError("a leader's append rewrites its batches: pass a bytearray")
        headers = batch.validate_batches(data, max_batch_bytes=max_message_bytes,
                                         allow_transactional=assign.transactional, allow_markers=assign.markers)
        batch.assign_offsets(data, headers, next_offset, assign.leader_epoch, assign.append_time_ms)
        headers = [batch.read_header(data, h.position) for h in headers]  # as written: offsets, times
        valid_bytes = len(data)
    else:
        valid_bytes = batch.whole_batches_bytes(data)
        headers = batch.validate_batches(memoryview(data)[:valid_bytes], max_batch_bytes=max_message_bytes,
                                         allow_padding=True, allow_transactional=True,
                                         allow_markers=True)  # the leader's batches, copied verbatim
        batch.check_follows(headers, next_offset)
    return valid_bytes, sum(h.record_count for h in headers), headers


def _entry_bytes_07(prefix: bytes) -> int | None:
    if len(prefix) < 4:
        return None
    (n,) = _INT32.unpack_from(prefix, 0)
    return 4 + n if 4 + n >= _MIN_07_ENTRY_BYTES else None


FORMAT_07 = RecordFormat("0.7", None, False, 4, _entry_bytes_07, messageset.scan_valid_prefix, _prepare_07)
FORMAT_V2 = RecordFormat("v2", b"v2\n", True, batch.LOG_OVERHEAD, batch.next_batch_bytes, batch.scan_valid_prefix,
                         _prepare_v2)
RECORD_FORMATS: dict[str, RecordFormat] = {f.name: f for f in (FORMAT_07, FORMAT_V2)}


def record_format(name: str) -> RecordFormat:
    """The format called ``name`` (``0.7`` or ``v2``); ``ValueError`` for any other."""
    try:
        return RECORD_FORMATS[name]
    except KeyError:
        raise ValueError(f"record format must be one of {sorted(RECORD_FORMATS)}, not {name!r}") from None


def read_record_format(fs: FileSystem, dir_path: str) -> RecordFormat:
    """The format of a partition directory: 0.7 without ``FORMAT_FILE``; ``LogLoadError`` for a file
    naming no format.  Blocking (a small read)."""
    path = os.path.join(dir_path, FORMAT_FILE)
    if not fs.exists(path):
        return FORMAT_07
    text = fs.read_file(path)
    for fmt in RECORD_FORMATS.values():
        if fmt.file_text == text:
            return fmt
    raise LogLoadError(f"{path} holds {text[:40]!r}, not a record format")


def write_record_format(fs: FileSystem, dir_path: str, fmt: RecordFormat) -> None:
    """Give a new partition directory its format: ``FORMAT_FILE`` written and fsynced, then the
    directory fsynced (a 0.7 directory has no file: nothing to do).  Blocking."""
    if fmt.file_text is None:
        return
    fs.write_synced(os.path.join(dir_path, FORMAT_FILE), fmt.file_text)
    fs.fsync_dir(dir_path)
