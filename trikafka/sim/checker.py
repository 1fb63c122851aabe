"""The promises a simulated run is held to, and the bookkeeping that checks them.

1. **Acknowledged writes survive**: every message set acknowledged with acks -1
   is, after the run heals, at its byte offset on the partition's leader and
   on every in-sync replica, byte for byte.
2. **Replicas agree**: every in-sync replica holds the same bytes as the
   leader below the high watermark.
3. **One leader per epoch**: no two brokers acted as leader of a partition in
   the same leader epoch at the same time.
4. **Consumers never see a message that vanished**: every entry a consumer
   read (only committed bytes are served) is, at the end, at its offset.

The consumer group's promises (5-7: ownership, order, commits) are checked by
``groups.GroupLedger``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Violation:
    """A broken promise: which one, and what was seen."""

    promise: str
    detail: str
    trace_index: int = -1  # where in the trace it was found


@dataclass
class Ledger:
    """What clients were promised or shown, by (partition, offset)."""

    acked: dict[tuple[int, int], bytes] = field(default_factory=dict)
    seen: dict[tuple[int, int], bytes] = field(default_factory=dict)
    leaders: dict[tuple[int, int], int] = field(default_factory=dict)  # (partition, epoch) -> broker

    def ack(self, partition: int, offset: int, data: bytes) -> Violation | None:
        known = self.acked.setdefault((partition, offset), data)
        if known != data:  # the earlier set's bytes were replaced: it did not survive
            return Violation("acknowledged writes survive", f"partition {partition}: two different sets "
                             f"acknowledged at offset {offset}")
        return None

    def see(self, partition: int, offset: int, entry: bytes) -> Violation | None:
        known = self.seen.setdefault((partition, offset), entry)
        if known != entry:
            return Violation("consumers never see a message that vanished",
                             f"partition {partition} offset {offset} served two different entries")
        return None

    def leading(self, partition: int, epoch: int, broker: int) -> Violation | None:
        known = self.leaders.setdefault((partition, epoch), broker)
        if known != broker:
            return Violation("one leader per epoch",
                             f"partition {partition} epoch {epoch}: brokers {known} and {broker} both led")
        return None


def check_end_state(ledger: Ledger, logs: dict[int, dict[int, bytes]], leaders: dict[int, int],
                    isrs: dict[int, tuple[int, ...]], high_watermarks: dict[int, int]) -> Violation | None:
    """Promises 1, 2 and 4 on the healed cluster.

    ``logs[partition][broker]`` is every byte of that replica; ``leaders``,
    ``isrs`` and ``high_watermarks`` are the partitions' final states.
    """
    for partition, leader in sorted(leaders.items()):
        if leader < 0:
            return Violation("acknowledged writes survive", f"partition {partition} has no leader after healing")
        replicas = logs[partition]
        hw = high_watermarks[partition]
        reference = replicas[leader]
        for member in isrs[partition]:
            if replicas[member][:hw] != reference[:hw]:
                return Violation("replicas agree", f"partition {partition}: broker {member} differs from leader "
                                 f"{leader} below the high watermark {hw}")
        for (p, offset), data in sorted(ledger.acked.items()):
            if p != partition:
                continue
            for member in isrs[partition]:
                if replicas[member][offset:offset + len(data)] != data:
                    return Violation("acknowledged writes survive", f"partition {partition}: the set acknowledged "
                                     f"at offset {offset} ({len(data)} bytes) is not on broker {member}")
        for (p, offset), entry in sorted(ledger.seen.items()):
            if p == partition and reference[offset:offset + len(entry)] != entry:
                return Violation("consumers never see a message that vanished",
                                 f"partition {partition}: the entry read at offset {offset} is gone")
    return None
