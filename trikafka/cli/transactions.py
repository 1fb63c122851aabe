"""``trikafka transactions``: the transactional ids of the Kafka listener's coordinators, or one in
detail (docs/protocol.md §19.5.4: ListTransactions at every broker, DescribeTransactions at the id's
coordinator)."""

from __future__ import annotations

import argparse
import datetime

from trikafka.cli.common import LOCAL_KAFKA, add_kafka, run_client, validate_kafka

LIST_HEADER = "transactional_id\tproducer_id\tstate"


def add_parser(commands) -> None:
    """Register ``transactions`` on the ``trikafka`` subparsers."""
    transactions = commands.add_parser("transactions")
    transactions.add_argument("transactional_id", nargs="?", metavar="ID",
                              help="show this transactional id (default: list them)")
    transactions.add_argument("--state", action="append", default=[], metavar="STATE",
                              help="list only ids in this state (Kafka's name: Ongoing, PrepareCommit, "
                                   "CompleteCommit, ...); repeatable")
    transactions.add_argument("--producer-id", action="append", type=int, default=[], metavar="N",
                              help="list only the ids of this producer id; repeatable")
    add_kafka(transactions)
    transactions.set_defaults(func=cmd_transactions, validate=validate_kafka, kafka=LOCAL_KAFKA)


async def _transactions(args: argparse.Namespace) -> int:
    from trikafka.cli.kafka_protocol import kafka_client
    from trikafka.client.kafka import KafkaAdmin

    async with kafka_client(args, auto_create=False) as client:
        admin = KafkaAdmin(client)
        if args.transactional_id is None:
            print(LIST_HEADER)
            for listed in await admin.list_transactions(states=args.state, producer_ids=args.producer_id):
                print(f"{listed.transactional_id}\t{listed.producer_id}\t{listed.state}")
            return 0
        found = (await admin.describe_transactions([args.transactional_id]))[args.transactional_id]
    started = "-" if found.start_time_ms < 0 else datetime.datetime.fromtimestamp(
        found.start_time_ms / 1000, tz=datetime.timezone.utc).isoformat(timespec="milliseconds")
    print(f"transactional id {found.transactional_id}: {found.state}, producer {found.producer_id} epoch "
          f"{found.producer_epoch}, timeout {found.timeout_ms} ms, started {started}")
    print("topic\tpartition")
    for tp in found.partitions:
        print(f"{tp.topic}\t{tp.partition}")
    return 0


def cmd_transactions(args: argparse.Namespace) -> int:
    return run_client(_transactions, args)
