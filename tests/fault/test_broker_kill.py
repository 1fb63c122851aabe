"""Fault model "broker SIGKILL under load": a real ``trikafka serve`` process dies mid-traffic.

Each cycle starts ``trikafka serve --standalone`` on the same log dir and drives it
with a PRODUCE_ACKED (acks = -1) producer, a plain PRODUCE producer and two
consumers, then SIGKILLs it at a random moment and starts it again.  After every
restart:

* every message acknowledged with acks = -1 is still there, byte for byte, at
  the offset the acknowledgement named;
* every message a consumer has already seen is still there, byte for byte, at
  the same offset;
* everything the broker serves parses, with valid CRCs, from offset 0 to the end;
* offsets go on from the recovered end (new appends land at or after it).

Seeds replay: ``TRIKAFKA_FAULT_SEED=<n>`` repeats a run (the seed is printed and
named in every assertion); ``TRIKAFKA_FAULT_THOROUGH=1`` runs 100 cycles instead
of 20.
"""

from __future__ import annotations

import os
import random
import signal

import pytest
import trio

from tests.helpers.broker_testing import serve_process, until_killed
from tests.helpers.fault_seeds import fault_seed
from tests.helpers.ledger import Ledger, entries_of
from trikafka.client import connect
from trikafka.wire.messageset import build_message_set
from trikafka.wire.reading import iter_messages, parse_entries

pytestmark = pytest.mark.slow

CYCLES = 100 if os.environ.get("TRIKAFKA_FAULT_THOROUGH") else 20
TOPIC = "faults"
FETCH_BYTES = 64 * 1024
# Small flush intervals so that some of what the consumers see was flushed by
# count, some by the scheduler, and some data is unflushed when the kill lands.
BROKER_SETTINGS = ("--set", "log.flush.interval=37", "--set", "log.default.flush.scheduler.interval.ms=20",
                   "--set", "log.file.size=200000")


async def acked_producer(port: int, ledger: Ledger, rng: random.Random, cycle: int) -> None:
    async with await connect("127.0.0.1", port) as conn:
        for seq in range(10**9):
            payloads = [f"acked {cycle}.{seq}.{i} ".encode() * rng.randint(1, 20) for i in range(rng.randint(1, 5))]
            data = build_message_set(payloads, magic=rng.choice([0, 1]))
            (result,) = await conn.produce_acked([(TOPIC, 0, data)], acks=-1, timeout_ms=5_000)
            if result.error == 0:
                for offset, entry in entries_of(data, result.base_offset):
                    ledger.promise(offset, entry, "acks=-1")
                ledger.acked_messages += len(payloads)


async def plain_producer(port: int, rng: random.Random, cycle: int) -> None:
    async with await connect("127.0.0.1", port) as conn:
        for seq in range(10**9):
            payloads = [f"plain {cycle}.{seq}.{i}".encode() * rng.randint(1, 50) for i in range(rng.randint(1, 50))]
            await conn.produce(TOPIC, 0, build_message_set(payloads, magic=rng.choice([0, 1])))
            await trio.sleep(0)


async def consumer(port: int, ledger: Ledger, start_offset: int) -> None:
    offset = start_offset
    async with await connect("127.0.0.1", port) as conn:
        while True:
            result = await conn.fetch(TOPIC, 0, offset, FETCH_BYTES)
            assert result.error == 0, f"fetch at {offset}: {result.error!r}"
            entries = entries_of(result.data, offset)
            for entry_offset, entry in entries:
                ledger.promise(entry_offset, entry, "seen by a consumer")
                ledger.seen_messages += 1
            if entries:
                offset = entries[-1][0] + len(entries[-1][1])
            else:
                await trio.sleep(0.005)


async def read_whole_log(port: int) -> bytes:
    async with await connect("127.0.0.1", port) as conn:
        (end,) = await conn.offsets(TOPIC, 0, -1, 1)
        (start,) = await conn.offsets(TOPIC, 0, -2, 1)
        assert start == 0, "nothing is deleted in this test"
        chunks, offset = [], 0
        while offset < end:
            result = await conn.fetch(TOPIC, 0, offset, 1 << 20)
            assert result.error == 0 and result.data, (offset, end, result.error)
            valid = parse_entries(result.data, offset).valid_bytes
            assert valid > 0, f"a fetch at {offset} returned no whole entry"
            chunks.append(result.data[:valid])
            offset += valid
        return b"".join(chunks)


async def check_promises(port: int, ledger: Ledger, seed: int, cycle: int) -> int:
    log = await read_whole_log(port)
    for _ in iter_messages(log):
        pass  # every served message is valid, CRC included
    for offset, entry in ledger.promised.items():
        got = log[offset:offset + len(entry)]
        assert got == entry, f"seed {seed} cycle {cycle}: promised entry at {offset} is lost or changed"
    return len(log)


async def test_sigkill_under_load_keeps_every_promise(tmp_path):
    seed = fault_seed()
    print(f"fault model 'broker SIGKILL under load': TRIKAFKA_FAULT_SEED={seed}, {CYCLES} cycles")
    rng = random.Random(seed)
    ledger = Ledger()
    log_dir = tmp_path / "logs"
    recovered_end = 0
    for cycle in range(CYCLES):
        async with serve_process(log_dir, *BROKER_SETTINGS) as (child, port):
            if cycle:
                recovered_end = await check_promises(port, ledger, seed, cycle)
            kill_after_s = rng.uniform(0.05, 0.6)
            killed = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(until_killed, killed, acked_producer, port, ledger, random.Random(rng.random()), cycle)
                nursery.start_soon(until_killed, killed, plain_producer, port, random.Random(rng.random()), cycle)
                nursery.start_soon(until_killed, killed, consumer, port, ledger, 0)
                nursery.start_soon(until_killed, killed, consumer, port, ledger, recovered_end)
                await trio.sleep(kill_after_s)
                killed.set()
                os.kill(child.pid, signal.SIGKILL)
                with trio.move_on_after(10):
                    await child.process.wait()
                # The load tasks end with connection errors; none may be anything else.
                nursery.cancel_scope.cancel()
    async with serve_process(log_dir, *BROKER_SETTINGS) as (child, port):
        end = await check_promises(port, ledger, seed, CYCLES)
        async with await connect("127.0.0.1", port) as conn:
            (result,) = await conn.produce_acked([(TOPIC, 0, build_message_set([b"after"]))], acks=-1)
            assert result.error == 0 and result.base_offset == end, "offsets do not go on from the recovered end"
    print(f"{ledger.acked_messages} messages acknowledged, {ledger.seen_messages} seen, "
          f"{len(ledger.promised)} entries promised; log end {end}")
    assert ledger.acked_messages > 0 and ledger.seen_messages > 0, "the load never got going"
