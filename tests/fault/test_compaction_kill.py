"""Fault model "broker SIGKILL during cleaning": a real ``trikafka serve`` dies mid-pass.

Each cycle starts ``trikafka serve --standalone`` on the same log dir with a compacted
topic, small segments, a throttled cleaner that runs at once, and drives it with an
acks = -1 producer of keyed messages, paced below the cleaner's throttle.  Once several
segments have filled and the broker logs that the cleaner swapped a segment (a pass is
under way and throttled, so more segments are usually still to come),
the broker is SIGKILLed.  After every restart:

* the log parses from offset 0 to its end, CRCs included, as a plain 0.7 reader reads it;
* every entry is one the producer wrote or a padding entry, and an acknowledged entry's
  offset holds that entry or padding, nothing else (no offset moved, no bytes changed);
* for every key, the last value in the log is the last acknowledged one or a later one;
* no cleaner leftover (``.cleaned``, ``.swap``) survives the restart.

Seeds replay: ``TRIKAFKA_FAULT_SEED=<n>``; ``TRIKAFKA_FAULT_THOROUGH=1`` runs 30 cycles.
"""

from __future__ import annotations

import os
import random
import signal

import pytest
import trio

from tests.helpers.broker_testing import serve_process, until_killed
from tests.helpers.fault_seeds import fault_seed
from trikafka.client import connect
from trikafka.wire import parse_entries
from trikafka.wire.keyed import build_keyed_set, iter_keyed_messages

pytestmark = pytest.mark.slow

CYCLES = 30 if os.environ.get("TRIKAFKA_FAULT_THOROUGH") else 6
TOPIC = "compacted"
KEYS = [b"key-%02d" % i for i in range(40)]
CLEANED_MARKER = b"trikafka.log.cleaner: cleaned"
ENTRIES_PER_CYCLE = 400  # about 35 kB: several 4 kB segments for each pass to clean
BROKER_SETTINGS = ("--set", "log.cleanup.policy=compact", "--set", "log.file.size=4000",
                   "--set", "log.cleaner.backoff.ms=20", "--set", "min.cleanable.dirty.ratio=0.01",
                   "--set", "log.cleaner.io.max.bytes.per.second=100000", "--set", "log.flush.interval=5",
                   "--set", "log.default.flush.scheduler.interval.ms=20")


class Model:
    def __init__(self) -> None:
        self.written: set[bytes] = set()  # every entry sent, acknowledged or not
        self.acked: dict[int, bytes] = {}  # offset -> entry
        self.last_acked_seq: dict[bytes, int] = {}
        self.seq = 0


async def producer(port: int, model: Model, rng: random.Random) -> None:
    async with await connect("127.0.0.1", port) as conn:
        while True:
            items = []
            for _ in range(rng.randint(1, 5)):
                model.seq += 1
                items.append((rng.choice(KEYS), b"%08d:" % model.seq + rng.randbytes(rng.randint(20, 60))))
            entries = [build_keyed_set([item]) for item in items]
            model.written.update(entries)
            (result,) = await conn.produce_acked([(TOPIC, 0, b"".join(entries))], acks=-1, timeout_ms=5_000)
            if result.error == 0:
                offset = result.base_offset
                for (key, value), entry in zip(items, entries):
                    model.acked[offset] = entry
                    model.last_acked_seq[key] = int(value[:8])
                    offset += len(entry)
            # Paced (about 25 kB/s) below the cleaner's throttle (100 kB/s): a pass that a kill
            # interrupts is read again in full after the restart, so an unpaced producer would grow
            # the dirty section each cycle until the first swap of a pass took longer than the wait.
            await trio.sleep(rng.uniform(0, 0.02))


async def read_whole_log(port: int) -> tuple[int, bytes]:
    async with await connect("127.0.0.1", port) as conn:
        (end,) = await conn.offsets(TOPIC, 0, -1, 1)
        chunks, offset = [], 0
        while offset < end:
            result = await conn.fetch(TOPIC, 0, offset, 64 * 1024)
            assert result.error == 0 and result.data, (offset, end, result.error)
            valid = parse_entries(result.data, offset).valid_bytes
            assert valid > 0, f"a fetch at {offset} returned no whole entry"
            chunks.append(result.data[:valid])
            offset += valid
        return end, b"".join(chunks)


async def check(port: int, model: Model, log_dir, seed: int, cycle: int) -> int:
    where = f"seed {seed} cycle {cycle}"
    assert not [n for n in os.listdir(log_dir / f"{TOPIC}-0") if n.endswith((".cleaned", ".swap"))], where
    end, log = await read_whole_log(port)
    parsed = parse_entries(log)
    assert parsed.valid_bytes == len(log) == end, where
    for entry in parsed.entries:
        raw = log[entry.offset:entry.next_offset]
        padding = entry.message.attributes == 0x11
        assert padding or raw in model.written, f"{where}: entry at {entry.offset} was never written"
        if entry.offset in model.acked:
            assert padding or raw == model.acked[entry.offset], f"{where}: acked offset {entry.offset} changed"
    last_seq: dict[bytes, int] = {}
    for message in iter_keyed_messages(log):  # CRC-checked
        last_seq[message.key] = int(message.value[:8])
    for key, seq in model.last_acked_seq.items():
        assert last_seq.get(key, -1) >= seq, f"{where}: {key!r} lost its last acknowledged value {seq}"
    return len(parsed.entries)


async def test_sigkill_during_cleaning_keeps_offsets_bytes_and_latest_values(tmp_path):
    seed = fault_seed()
    print(f"fault model 'broker SIGKILL during cleaning': TRIKAFKA_FAULT_SEED={seed}, {CYCLES} cycles")
    rng = random.Random(seed)
    model = Model()
    log_dir = tmp_path / "logs"
    interrupted = 0
    for cycle in range(CYCLES):
        async with serve_process(log_dir, *BROKER_SETTINGS) as (child, port):
            if cycle:
                await check(port, model, log_dir, seed, cycle)
                interrupted += child.stderr.count(b"finishing the interrupted swap")
                interrupted += child.stderr.count(b".cleaned")
            killed = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(until_killed, killed, producer, port, model, random.Random(rng.random()))
                acked_before = len(model.acked)
                with trio.fail_after(60):
                    while len(model.acked) < acked_before + ENTRIES_PER_CYCLE:
                        await trio.sleep(0.05)  # let several segments fill before arming the kill
                    swaps_before = child.stderr.count(CLEANED_MARKER)
                    while child.stderr.count(CLEANED_MARKER) <= swaps_before:
                        await child._stderr_changed.wait()
                await trio.sleep(rng.uniform(0, 0.05))  # somewhere in the rest of the pass
                killed.set()
                os.kill(child.pid, signal.SIGKILL)
                with trio.move_on_after(10):
                    await child.process.wait()
                nursery.cancel_scope.cancel()
    async with serve_process(log_dir, *BROKER_SETTINGS) as (child, port):
        entries = await check(port, model, log_dir, seed, CYCLES)
        interrupted += child.stderr.count(b"finishing the interrupted swap") + child.stderr.count(b".cleaned")
    print(f"{len(model.acked)} entries acknowledged, {entries} entries in the final log, "
          f"{interrupted} interrupted cleanings finished or swept at restart")
    assert model.acked, "the load never got going"
