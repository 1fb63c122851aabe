"""``trikafka groups --kafka`` and ``trikafka consume --kafka --group``: groups over the Kafka protocol (§17.8).

``groups --kafka`` lists the groups of every broker, describes one (state,
assignor, members with their client id, host and decoded assignment, and per
partition the committed offset, the log end and the lag in records) or, with
``--delete``, deletes one.  ``consume --kafka --group`` runs a
``KafkaGroupConsumer`` and prints what the group hands this member.
"""

from __future__ import annotations

import argparse
import sys

import trio

from trikafka.cli.common import Printer, plural, stop_on_sigterm
from trikafka.cli.kafka_protocol import kafka_client
from trikafka.cli.message_format import Printed
from trikafka.client.kafka import LATEST, KafkaGroupConsumer, GroupDescription, KafkaAdmin, TopicPartition
from trikafka.client.kafka.group_offsets import NO_OFFSET

MEMBERS_HEADER = "member\tinstance\tclient_id\thost\tassignment"
OFFSETS_HEADER = "topic\tpartition\tmember\tcommitted\tlog_end\tlag"


async def groups(args: argparse.Namespace) -> int:
    """List the groups, describe ``args.group``, or delete it (``--delete``)."""
    async with kafka_client(args, auto_create=False) as client:
        admin = KafkaAdmin(client)
        if not args.group:
            print("group\tprotocol_type\tstate")
            for listing in await admin.list_groups():
                print(f"{listing.group_id}\t{listing.protocol_type}\t{listing.state or '-'}")
            return 0
        if args.delete:
            error = (await admin.delete_groups([args.group])).get(args.group)
            if error is not None:
                print(f"trikafka: {error}", file=sys.stderr)
                return 1
            print(f"trikafka: deleted group {args.group}", file=sys.stderr)
            return 0
        description = (await admin.describe_groups([args.group]))[args.group]
        committed = await admin.list_group_offsets(args.group)
        if description.state == "Dead" and not committed:  # what a coordinator answers for an unknown id
            print(f"trikafka: no group {args.group!r}", file=sys.stderr)
            return 1
        _print_group(description)
        owners = {TopicPartition(topic, p): member.member_id for member in description.members
                  if member.assignment is not None for topic, ids in member.assignment.partitions.items()
                  for p in ids}
        partitions = sorted(set(committed) | set(owners))
        ends: dict[TopicPartition, int] = {}
        for topic in sorted({tp.topic for tp in partitions}):
            found = await admin.list_offsets(topic, {tp.partition: LATEST for tp in partitions if tp.topic == topic})
            ends.update({TopicPartition(topic, p): at.offset for p, at in found.items()})
        print(OFFSETS_HEADER)
        for tp in partitions:
            offset = committed.get(tp, NO_OFFSET)
            end = ends[tp]
            shown = "-" if offset == NO_OFFSET else str(offset)
            lag = "-" if offset == NO_OFFSET else str(max(0, end - offset))
            print(f"{tp.topic}\t{tp.partition}\t{owners.get(tp, '-')}\t{shown}\t{end}\t{lag}")
        return 0


def _print_group(description: GroupDescription) -> None:
    epoch = "" if description.group_epoch is None else f", group epoch {description.group_epoch}"
    print(f"group {description.group_id}: {description.state}, protocol {description.protocol_type or '-'}"
          f"/{description.protocol or '-'}{epoch}, {plural(len(description.members), 'member')}")
    print(MEMBERS_HEADER)
    for member in description.members:
        assignment = "?" if member.assignment is None else ",".join(
            f"{topic}-{p}" for topic, ids in sorted(member.assignment.partitions.items()) for p in ids) or "-"
        print(f"{member.member_id}\t{member.group_instance_id or '-'}\t{member.client_id}\t{member.client_host}\t"
              f"{assignment}")


async def consume(args: argparse.Namespace) -> int:
    """Print the records the group hands this member until stopped (or ``--max-messages``)."""
    printer = Printer(args)

    async def on_assigned(partitions: list[TopicPartition]) -> None:
        shown = ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions) or "nothing"
        print(f"trikafka: group {args.group} assigned {shown}", file=sys.stderr, flush=True)

    async def read() -> None:
        async with kafka_client(args, auto_create=False) as client:
            async with KafkaGroupConsumer(client, args.group, [args.topic], auto_offset_reset=args.from_,
                                          auto_commit_interval_s=args.commit_interval_ms / 1000,
                                          on_assigned=on_assigned, read_committed=args.read_committed,
                                          group_protocol=args.group_protocol or "classic") as consumer:
                with trio.CancelScope() as scope:
                    printer.stop = scope.cancel
                    async for message in consumer:
                        record = message.record
                        printer.write(Printed(message.topic, str(message.partition), record.offset,
                                              record.offset + 1, record.key, record.value or b""))
                await consumer.commit()

    await stop_on_sigterm(read)
    return 0
