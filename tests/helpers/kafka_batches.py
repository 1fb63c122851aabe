"""v2 record batches for the log's tests (docs/protocol.md §16.6), built with the codec's builder.

``make_batch`` spaces its records' timestamps ``timestamp_step_ms`` apart, as
the log's time-index tests need; ``batches`` numbers consecutive batches;
``v2_log`` opens a Kafka-format log on a fake file system, ``stored`` reads
its bytes back; ``lead_verified`` appends a transactional batch as a leader
whose coordinator verified it (§19.5.7).
"""

from __future__ import annotations

from trikafka.kafka.batch import read_header
from trikafka.kafka.records import Record, build_batch
from trikafka.log import LogConfig, LogManager, ManualClock, OffsetAssignment
from trikafka.testing import FakeFileSystem

ROOT = "/logs"
DIR = ROOT + "/t-0"
T0 = 1_000_000
V2 = LogConfig(record_format="v2")


def make_batch(values: list[bytes], *, base_offset: int = 0, base_timestamp_ms: int = 1_000,
               timestamp_step_ms: int = 1, leader_epoch: int = -1, producer_id: int = -1) -> bytes:
    """One uncompressed batch of ``values`` (one record each, no key), timestamps ``base_timestamp_ms`` + k * step."""
    assert values, "a batch holds at least one record"
    records = [Record(base_offset + k, base_timestamp_ms + k * timestamp_step_ms, None, value)
               for k, value in enumerate(values)]
    return build_batch(records, base_offset=base_offset, leader_epoch=leader_epoch, producer_id=producer_id)


def batches(counts: list[int], *, base_offset: int = 0, base_timestamp_ms: int = 1_000,
            value_bytes: int = 10) -> bytes:
    """Consecutive batches of ``counts[k]`` records each, numbered from ``base_offset``."""
    out = bytearray()
    offset, timestamp_ms = base_offset, base_timestamp_ms
    for count in counts:
        out += make_batch([bytes([offset % 256]) * value_bytes for _ in range(count)], base_offset=offset,
                          base_timestamp_ms=timestamp_ms)
        offset += count
        timestamp_ms += count
    return bytes(out)


def manager(fs=None, clock=None, config=V2, **kwargs):
    clock = clock or ManualClock(T0)
    fs = fs or FakeFileSystem(0, clock)
    m = LogManager(ROOT, config, fs, clock, **kwargs)
    m.open()
    return m, fs, clock


def v2_log(**config):
    m, fs, clock = manager(config=LogConfig(record_format="v2", **config))
    return m.get_or_create("t", 0), m, fs, clock


def stored(log):
    return b"".join(s.file.pread(0, s.size) for s in log.segments.segments)


def lead_verified(log, data: bytearray, leader_epoch: int = 1):
    """The leader's append of a transactional batch after its verification (§19.5.7): the check
    starts (a guard, unless the transaction is open), the coordinator agrees, the append presents it."""
    header = read_header(data)
    guard = log.producers.start_verification(header.producer_id, header.producer_epoch)
    return log.append(data, assign=OffsetAssignment(leader_epoch, transactional=True, guard=guard))
