"""Compaction on the real file system: the space comes back, offsets and bytes stay.

The guarantees of docs/protocol.md §11.1 and §11.3 on disk: 1,000 keys updated 100 times
each shrink on disk (``st_blocks``, the zeros are holes) to within 2x of the live
data; every retained message is at its original offset with its original bytes;
and a plain 0.7 reader fetching from offset 0 parses the whole log.
"""

from __future__ import annotations

import os
import random

from trikafka.log import Log, LogConfig, OsFileSystem, wall_clock_ms
from trikafka.log.cleaner import CompactionPolicy, LogCleaner
from trikafka.wire import iter_messages, parse_entries
from trikafka.wire.keyed import encode_keyed_entry, iter_keyed_messages

KEYS = 1000
UPDATES = 100
FETCH_BYTES = 300 * 1024  # a 0.7 consumer's fetch.size


def read_like_a_07_consumer(log: Log) -> tuple[list, int]:
    """Fetch from 0 with a fixed fetch size, advance by the valid bytes (spec §5.2)."""
    offset, messages, fetches = 0, [], 0
    while offset < log.visible_end:
        data = log.read(offset, FETCH_BYTES).read()
        parsed = parse_entries(data, offset)
        assert parsed.valid_bytes > 0, offset  # never stuck
        messages.extend(iter_messages(data[:parsed.valid_bytes], offset))
        offset += parsed.valid_bytes
        fetches += 1
    assert offset == log.visible_end
    return messages, fetches


def test_compacted_log_shrinks_on_disk_and_keeps_offsets(tmp_path):
    fs = OsFileSystem()
    directory = str(tmp_path / "t-0")
    os.makedirs(directory)
    log = Log.open(fs, directory, "t", 0, LogConfig(segment_bytes=8 << 20), wall_clock_ms, False)
    rng = random.Random(17)
    original: dict[int, bytes] = {}
    latest: dict[bytes, int] = {}
    for update in range(UPDATES):
        keys = list(range(KEYS))
        rng.shuffle(keys)
        batch = [encode_keyed_entry(b"key-%04d" % k, b"%03d:" % update + rng.randbytes(96)) for k in keys]
        result = log.append(b"".join(batch))
        offset = result.base_offset
        for k, entry in zip(keys, batch):
            original[offset] = entry
            latest[b"key-%04d" % k] = offset
            offset += len(entry)
    log.flush()
    log.roll()  # the active segment is never cleaned
    total_bytes = log.visible_end
    live_bytes = sum(len(original[o]) for o in latest.values())

    def disk_bytes() -> int:
        return sum(os.stat(s.path).st_blocks * 512 for s in log.segments.segments)

    before = disk_bytes()
    result = LogCleaner(fs, wall_clock_ms).clean(log, CompactionPolicy(compact=True, delete=False))
    for segment in result.segments:
        assert log.install_cleaned(segment)
    after = disk_bytes()
    print(f"\n{total_bytes} bytes of log, {live_bytes} live; on disk {before} -> {after} "
          f"({after / live_bytes:.2f}x live)")
    assert log.visible_end == total_bytes  # no offset moved
    assert after <= 2 * live_bytes

    messages, fetches = read_like_a_07_consumer(log)
    assert fetches > 1
    keyed = list(iter_keyed_messages(b"".join(s.file.pread(0, s.size) for s in log.segments.segments)))
    assert {m.offset for m in keyed} == {m.offset for m in messages}
    final = {}
    for m in keyed:
        assert fs_bytes(log, m.offset, m.next_offset) == original[m.offset]  # original bytes, original offset
        final[m.key] = m.offset
    assert final == latest  # every key's latest value, nothing else survives as the last word
    assert len(keyed) <= KEYS + len(log.segments.segments)  # at most one obsolete last entry per segment

    # Reopened from disk (recovery scans the newest segment), the log still reads the same.
    log.close()
    reopened = Log.open(fs, directory, "t", 0, LogConfig(segment_bytes=8 << 20), wall_clock_ms, True)
    assert [m.offset for m in read_like_a_07_consumer(reopened)[0]] == [m.offset for m in messages]
    reopened.close()


def fs_bytes(log: Log, start: int, end: int) -> bytes:
    segment = log.segments.find(start)
    return segment.file.pread(start - segment.start, end - start)
