"""A group consumer in a process of its own, for the SIGKILL fault test.

``python -m tests.helpers.group_consumer_child --zookeeper HOST:PORT/CHROOT --group G --topic T``

Prints ``ready <consumer id>`` once registered, then one line per message,
flushed at once so that what the parent reads is exactly what the
"application" saw before it died::

    msg <topic> <partition> <offset> <next_offset> <generation> <payload>

It runs until killed.  Autocommit is on with a short interval, so a kill lands
between commits and leaves an uncommitted range behind.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import trio


async def main(args: argparse.Namespace) -> None:
    from trikafka.group import GroupConfig, GroupConsumer
    from trikafka.zk import KazooZooKeeperClient

    wanted = dict(rebalance_retries_max=40, rebalance_backoff_s=0.2, autocommit_enable=True,
                  autocommit_interval_s=args.autocommit_interval_s, autooffset_reset="smallest",
                  fetch_max_bytes=16 * 1024)
    known = {f.name for f in dataclasses.fields(GroupConfig)}
    config = GroupConfig(**{k: v for k, v in wanted.items() if k in known})
    retry = dict(max_tries=-1, delay=0.05, backoff=1.5, max_delay=0.5, max_jitter=0.1)
    async with KazooZooKeeperClient(args.zookeeper, session_timeout_s=args.session_timeout_s,
                                    connection_retry=retry, ensure_chroot=False) as zk:
        async with GroupConsumer(zk, args.group, {args.topic: 1}, consumer_id=args.consumer_id,
                                 config=config) as consumer:
            print(f"ready {consumer.consumer_id}", flush=True)
            async for m in consumer:
                print(f"msg {m.topic} {m.partition} {m.offset} {m.next_offset} "
                      f"{getattr(consumer, 'generation', None)} {bytes(m.payload).decode()}", flush=True)
                if args.delay_s:
                    await trio.sleep(args.delay_s)  # a slow application: the kill lands mid-stream


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zookeeper", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--consumer-id", default=None)
    parser.add_argument("--session-timeout-s", type=float, default=2.0)
    parser.add_argument("--autocommit-interval-s", type=float, default=0.3)
    parser.add_argument("--delay-s", type=float, default=0.005)
    return parser.parse_args(argv)


if __name__ == "__main__":
    trio.run(main, parse_args(sys.argv[1:]))
