"""``trikafka audit``: compare producers' audit events with what each tier holds.

The first cluster given is where producers publish their audit events (and
where loaders publish theirs); every cluster given is read in full for the
audited topics and counted per window (see ``tally.AuditTally``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable

from trikafka.client import SimpleConsumer
from trikafka.wire import ConsumedMessage
from trikafka.wire.audit import AUDIT_TOPIC, decode_event
from trikafka.wire.envelope import decode_envelope
from trikafka.zk import KazooZooKeeperClient
from trikafka.zk.client import ZooKeeperClient

from .tally import AuditRow, AuditTally
from .topics import live_brokers, registered_counts


async def read_topic(zk: ZooKeeperClient, topic: str, *, connect_timeout_s: float = 5.0
                     ) -> AsyncIterator[tuple[int, int, ConsumedMessage]]:
    """``(broker id, partition, message)`` for every message of ``topic`` on a cluster,
    from each partition's start to its end as of now."""
    brokers = await live_brokers(zk)
    for broker_id, count in sorted((await registered_counts(zk, topic)).items()):
        address = brokers.get(broker_id)
        if address is None:
            raise OSError(f"broker {broker_id} holding {topic} is not registered (down?)")
        for partition in range(count):
            async with SimpleConsumer(address, topic, partition, use_fetch_wait=False,
                                      connect_kwargs=dict(connect_timeout_s=connect_timeout_s,
                                                          request_timeout_s=30.0)) as simple:
                start, end = await simple.earliest(), await simple.latest()
                if start >= end:
                    continue
                async for message in simple.messages(start):
                    yield broker_id, partition, message
                    if message.next_offset >= end:
                        break


async def tally_clusters(clusters: list[str], *, open_zk: Callable[[str], KazooZooKeeperClient] = KazooZooKeeperClient
                         ) -> AuditTally:
    """Read the audit events of ``clusters[0]`` and the audited topics of every cluster."""
    tally = AuditTally()
    async with open_zk(clusters[0]) as zk:
        async for _broker, _partition, message in read_topic(zk, AUDIT_TOPIC):
            event = decode_event(message.payload)
            if event is not None:
                tally.add_event(event)
    for connect in clusters:
        tally.add_tier(connect)
        async with open_zk(connect) as zk:
            for topic in tally.topics:
                async for _broker, _partition, message in read_topic(zk, topic):
                    envelope = decode_envelope(message.payload)
                    if envelope is not None:
                        tally.add_held(connect, topic, envelope)
    return tally


def format_table(rows: list[AuditRow], *, everything: bool = False) -> str:
    """The rows with missing, duplicated or extra messages (all of them with ``everything``)."""
    shown = [r for r in rows if everything or not r.ok]
    header = ("topic", "window start (ms)", "tier", "expected", "held", "distinct", "missing", "duplicated",
              "extra")
    table = [header] + [(r.topic, str(r.window_start_ms), r.tier, str(r.expected),
                         "-" if r.held is None else str(r.held), str(r.distinct), str(r.missing),
                         str(r.duplicated), str(r.extra)) for r in shown]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    windows = len({(r.topic, r.window_start_ms) for r in rows})
    lines.append(f"{windows} window(s), {len(rows)} row(s): {sum(r.missing for r in rows)} missing, "
                 f"{sum(r.duplicated for r in rows)} duplicated, {sum(r.extra for r in rows)} unaccounted")
    return "\n".join(lines)


def report(rows: list[AuditRow]) -> dict:
    """The ``--json`` document: every row, and totals."""
    return {"windows": [r.as_dict() for r in rows], "missing": sum(r.missing for r in rows),
            "duplicated": sum(r.duplicated for r in rows), "extra": sum(r.extra for r in rows)}


async def audit_main(args) -> int:
    """``trikafka audit``: args.zookeeper (list), args.json, args.all."""
    tally = await tally_clusters(args.zookeeper)
    rows = tally.rows()
    if args.json:
        print(json.dumps(report(rows), indent=1))
    else:
        print(format_table(rows, everything=args.all))
    sys.stdout.flush()
    return 0


__all__ = ["audit_main", "format_table", "read_topic", "report", "tally_clusters"]
