"""Reading one broker-partition byte range: the fetch loop run inside Spark tasks.

``iter_message_chunks`` implements the client algorithm of spec §5.2 over a
planned range ``[start, end)`` whose bounds are entry boundaries: fetch,
decode the complete entries with ``wire.iter_messages`` (CRC-checked,
wrappers unpacked with the §4 offset rule), advance by the bytes decoded, and
drop the partial tail for the next fetch to re-read.  One decoded chunk per
fetch response keeps memory bounded by the fetch size; every response is
received into one buffer the loop reuses.  ``iter_column_chunks`` is the
same loop decoding in column form (``wire.columns`` with Arrow's gather).

A first entry larger than the fetch is handled by growing the fetch size up
to ``max_fetch_bytes`` (the design doc's advice, which 0.7 never
implemented; spec §5.2), then shrinking back.  Past that bound the read
fails with ``MaxFetchSizeExceededError`` instead of stalling as 0.7 did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from trikafka.wire import ConsumedMessage, ErrorCode, grown_fetch_size, iter_messages, parse_entries
from trikafka.wire.columns import DecodedSet

from .blocking_client import BrokerConnection
from .columns import decode_fetched
from .offsets import PartitionKey


class ReadError(RuntimeError):
    """A planned range cannot be read as planned."""


class MaxFetchSizeExceededError(ReadError):
    """One message does not fit in the largest allowed fetch (``maxFetchSize``)."""


class DataLossError(ReadError):
    """Retention deleted bytes the range was meant to read (``failOnDataLoss``)."""


@dataclass(frozen=True, slots=True)
class FetchSizing:
    """How many bytes to ask for per fetch, and how far a fetch may grow."""

    fetch_bytes: int
    max_fetch_bytes: int

    def __post_init__(self) -> None:
        assert 0 < self.fetch_bytes <= self.max_fetch_bytes


def iter_message_chunks(
    conn: BrokerConnection,
    key: PartitionKey,
    start: int,
    end: int,
    sizing: FetchSizing,
    *,
    fail_on_data_loss: bool = True,
    log: Callable[[str], None] = lambda _msg: None,
) -> Iterator[list[ConsumedMessage]]:
    """Yield the messages of ``[start, end)`` of ``key``, one list per fetch response.

    Every byte of the range is delivered exactly once; the last message of
    the last chunk has ``next_offset == end``.  Raises ``ReadError`` (or a
    subclass) when the broker cannot serve the range as planned, and
    ``trikafka.wire.InvalidMessageError`` on corrupt data.
    """
    yield from _iter_fetched(conn, key, start, end, sizing, fail_on_data_loss, log, _decode_messages)


def _decode_messages(buffer: bytearray, size: int, pos: int) -> tuple[list[ConsumedMessage], int]:
    messages = list(iter_messages(memoryview(buffer)[:size], pos))
    return messages, (messages[-1].next_offset - pos if messages else 0)


def iter_column_chunks(
    conn: BrokerConnection,
    key: PartitionKey,
    start: int,
    end: int,
    sizing: FetchSizing,
    *,
    fail_on_data_loss: bool = True,
    log: Callable[[str], None] = lambda _msg: None,
) -> Iterator[DecodedSet]:
    """``iter_message_chunks`` yielding ``wire.columns.DecodedSet``s (the Arrow path: the
    payloads of runs gathered by Arrow, no per-message objects)."""
    yield from _iter_fetched(conn, key, start, end, sizing, fail_on_data_loss, log, _decode_columns)


def _decode_columns(buffer: bytearray, size: int, pos: int) -> tuple[DecodedSet, int]:
    decoded = decode_fetched(buffer, pos, size)
    return decoded, decoded.valid_bytes


def _iter_fetched(
    conn: BrokerConnection, key: PartitionKey, start: int, end: int, sizing: FetchSizing,
    fail_on_data_loss: bool, log: Callable[[str], None],
    decode: Callable[[bytearray, int, int], tuple[object, int]],
) -> Iterator:
    """The fetch loop: each response lands in one reused buffer (``fetch_into``) and is
    decoded from there by ``decode(buffer, size, pos) -> (chunk, valid bytes)``, whose
    chunk must not refer to the buffer."""
    buffer = bytearray(min(sizing.fetch_bytes, max(end - start, 0)))
    pos, size = start, sizing.fetch_bytes
    while pos < end:
        want = min(size, end - pos)
        into = buffer if want <= len(buffer) else bytearray(want)  # a grown fetch, for one big entry
        error, got = conn.fetch_into(key.topic, key.partition, pos, want, into)
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            pos = _skip_deleted(conn, key, pos, end, fail_on_data_loss, log)
            continue
        if error != ErrorCode.NO_ERROR:
            raise ReadError(f"{key}: fetch at {pos} failed with {error.name}")
        if not got:
            raise ReadError(
                f"{key}: the broker's visible end is {pos}, below the planned end {end} "
                "(log truncated by crash recovery, or a different broker at that address?)"
            )
        chunk, valid_bytes = decode(into, got, pos)
        if valid_bytes:
            pos += valid_bytes  # the end of the last complete entry
            size = sizing.fetch_bytes
            yield chunk
            continue
        size = _grown_fetch_size(key, memoryview(into)[:got], pos, end, want, sizing)
    assert pos == end, (pos, end)


def _grown_fetch_size(
    key: PartitionKey, data: bytes | memoryview, pos: int, end: int, asked: int, sizing: FetchSizing
) -> int:
    """The fetch size that holds the (incomplete) first entry at ``pos`` whole."""
    needed = parse_entries(data, pos).first_entry_bytes
    if needed is None or pos + needed > end:
        raise ReadError(f"{key}: the planned end {end} is not an entry boundary (entry at {pos})")
    if needed <= asked:
        raise ReadError(f"{key}: the broker returned a cut entry at {pos} although the fetch could hold it")
    grown = grown_fetch_size(asked, sizing.max_fetch_bytes, needed)
    if grown is None:
        raise MaxFetchSizeExceededError(
            f"{key}: the message at {pos} takes {needed} bytes, more than maxFetchSize="
            f"{sizing.max_fetch_bytes}; raise maxFetchSize"
        )
    return grown


def _skip_deleted(
    conn: BrokerConnection, key: PartitionKey, pos: int, end: int, fail_on_data_loss: bool,
    log: Callable[[str], None],
) -> int:
    """After OffsetOutOfRange at ``pos``: where to continue, or raise."""
    log_start = conn.log_start(key.topic, key.partition)
    if pos >= log_start:
        raise ReadError(f"{key}: offset {pos} is beyond the broker's visible end (planned end {end})")
    if fail_on_data_loss:
        raise DataLossError(
            f"{key}: bytes [{pos}, {log_start}) were deleted by retention before being read; "
            "set failOnDataLoss=false to skip them"
        )
    log(f"{key}: skipping {min(log_start, end) - pos} bytes deleted by retention")
    return min(log_start, end)


def last_boundary_within(
    conn: BrokerConnection, key: PartitionKey, start: int, limit: int, sizing: FetchSizing
) -> int:
    """The largest entry boundary in ``[start, limit]`` reachable from ``start``.

    ``limit`` must not exceed the visible end.  Reads the bytes (shallowly,
    with ``wire.parse_entries``) because 0.7 offers no way to find a boundary
    without them; returns ``start`` when the first entry alone passes ``limit``.
    """
    pos = start
    while pos < limit:
        result = conn.fetch(key.topic, key.partition, pos, min(sizing.fetch_bytes, limit - pos))
        if result.error != ErrorCode.NO_ERROR or not result.data:
            break  # the read itself reports real errors; here we just stop early
        parsed = parse_entries(result.data, pos)
        if parsed.valid_bytes:
            pos += parsed.valid_bytes
            continue
        needed = parsed.first_entry_bytes  # one entry bigger than the fetch
        if needed is None or pos + needed > limit:
            break
        pos += needed
    return pos


def next_entry_end(conn: BrokerConnection, key: PartitionKey, start: int) -> int | None:
    """Where the entry at ``start`` ends (from its 4-byte length prefix), or None if none is visible."""
    result = conn.fetch(key.topic, key.partition, start, 4)
    if result.error != ErrorCode.NO_ERROR or len(result.data) < 4:
        return None
    size = int.from_bytes(result.data[:4], "big", signed=True)
    return start + 4 + size if size >= 0 else None
