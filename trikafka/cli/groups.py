"""``trikafka groups``: the consumer groups in ZooKeeper, or one group's members, owners, offsets and lag.

With ``--kafka`` the groups are those of the Kafka protocol's coordinators (``cli.kafka_groups``, §17.8).
"""

from __future__ import annotations

import argparse
import sys

from trikafka.cli.common import (LOCAL_KAFKA, add_kafka, add_zookeeper, plural, run_client, run_group_client,
                                 validate_kafka)


def add_parser(commands) -> None:
    """Register ``groups`` on the ``trikafka`` subparsers."""
    groups = commands.add_parser("groups")
    groups.add_argument("group", nargs="?", metavar="GROUP", help="show this group (default: list the groups)")
    add_zookeeper(groups, "the ZooKeeper holding the groups")
    add_kafka(groups)
    groups.add_argument("--delete", action="store_true", help="with --kafka: delete GROUP (it must have no members)")
    groups.set_defaults(func=cmd_groups, validate=_validate)


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.kafka and ":" not in args.kafka and args.group is None:  # ``groups --kafka GROUP``
        args.group, args.kafka = args.kafka, LOCAL_KAFKA
    validate_kafka(parser, args)
    if args.delete and (args.kafka is None or not args.group):
        parser.error("--delete needs --kafka and a GROUP")

async def _groups_main(args: argparse.Namespace) -> int:
    from trikafka.group.inspect import describe_group, list_groups, measure_lag
    from trikafka.zk import KazooZooKeeperClient, paths

    async with KazooZooKeeperClient(args.zookeeper, ensure_chroot=False) as zk:
        if not args.group:
            print("group\tmembers")
            for group, members in sorted((await list_groups(zk)).items()):
                print(f"{group}\t{members}")
            return 0
        if await zk.exists(paths.consumer_group(args.group)) is None:  # as `groups G --kafka` answers
            print(f"trikafka: no group {args.group!r}", file=sys.stderr)
            return 1
        description = await measure_lag(zk, await describe_group(zk, args.group))
    print(f"group {description.group}: {plural(len(description.members), 'member')}")
    print("member\tsubscription")
    for member, subscription in sorted(description.members.items()):
        shown = subscription if isinstance(subscription, str) else subscription.encode().decode()
        print(f"{member}\t{shown}")
    print("topic\tpartition\towner\tcommitted\tlog_end\tlag_bytes")
    for p in description.partitions:
        def text(value):
            return "-" if value is None else str(value)
        print(f"{p.topic}\t{p.partition}\t{text(p.owner)}\t{text(p.committed)}\t{text(p.log_end)}\t"
              f"{text(p.lag_bytes)}")
        if p.error:
            print(f"trikafka: {p.topic}/{p.partition}: log end unknown: {p.error}", file=sys.stderr)
    return 0


def cmd_groups(args: argparse.Namespace) -> int:
    if args.kafka is not None:
        from trikafka.cli import kafka_groups

        return run_client(kafka_groups.groups, args)
    return run_group_client(_groups_main, args)
