"""Entry points of ``trikafka mirror`` and ``trikafka audit``: argparse registration
and functions taking the parsed ``Namespace`` (the CLI only wires them up)."""

from __future__ import annotations

import argparse
import signal
import sys

import trio

from .mirror import DEFAULT_GROUP, MirrorConfig, MirrorStats, run_mirror


def add_mirror_parser(commands) -> argparse.ArgumentParser:
    """Register ``mirror`` on a subparsers object."""
    mirror = commands.add_parser("mirror", help="copy topics of source clusters into a target cluster, "
                                                "at least once; runs until SIGINT/SIGTERM")
    mirror.add_argument("--source-zookeeper", action="append", required=True, metavar="CONNECT",
                        help="a source cluster's ZooKeeper, host:port[/chroot] (repeatable)")
    mirror.add_argument("--target-zookeeper", required=True, metavar="CONNECT",
                        help="the target cluster's ZooKeeper")
    mirror.add_argument("--whitelist", required=True, metavar="REGEX",
                        help="topics to mirror (Java regex matching whole names)")
    mirror.add_argument("--group", default=DEFAULT_GROUP, help=f"consumer group on the sources "
                                                               f"(default {DEFAULT_GROUP})")
    mirror.add_argument("--consumer-id", help="consumer id in that group (default: the host name)")
    mirror.add_argument("--acks", type=int, choices=(1, -1), default=1,
                        help="target acknowledgement: 1 appended, -1 flushed (default 1)")
    mirror.add_argument("--commit-interval-ms", type=int, default=1000,
                        help="how often acknowledged offsets are committed (default 1000)")
    mirror.set_defaults(func=mirror_command)
    return mirror


def add_audit_parser(commands) -> argparse.ArgumentParser:
    """Register ``audit`` on a subparsers object."""
    audit = commands.add_parser("audit", help="compare producers' audit counts with what each cluster holds")
    audit.add_argument("--zookeeper", action="append", required=True, metavar="CONNECT",
                       help="a cluster to count (repeatable); the first one holds the audit events")
    audit.add_argument("--json", action="store_true", help="print the per-window table as JSON")
    audit.add_argument("--all", action="store_true", help="print every window, not only those with problems")
    audit.set_defaults(func=audit_command)
    return audit


def mirror_config(args: argparse.Namespace) -> MirrorConfig:
    """The ``MirrorConfig`` of ``trikafka mirror``'s arguments; ``ValueError`` for bad ones."""
    if args.commit_interval_ms < 0:
        raise ValueError("--commit-interval-ms must not be negative")
    return MirrorConfig(args.source_zookeeper, args.target_zookeeper, args.whitelist, group=args.group,
                        consumer_id=args.consumer_id, acks=args.acks,
                        commit_interval_s=args.commit_interval_ms / 1000)


async def mirror_main(config: MirrorConfig) -> int:
    stats = MirrorStats()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(run_mirror, config, stats)
            print(f"trikafka: mirroring {config.whitelist} from {', '.join(config.sources)} "
                  f"to {config.target}", file=sys.stderr, flush=True)
            async for signum in signals:
                print(f"trikafka: {signal.Signals(signum).name}: committing and stopping", file=sys.stderr,
                      flush=True)
                nursery.cancel_scope.cancel()
                break
    print(f"trikafka: mirrored {stats.total_messages} messages", file=sys.stderr, flush=True)
    return 0


def mirror_command(args: argparse.Namespace) -> int:
    """``trikafka mirror``; exit 0 after a signal, 1 with a one-line error (2 for bad arguments)."""
    try:
        config = mirror_config(args)
    except ValueError as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return 2
    return _run(mirror_main, config)


def audit_command(args: argparse.Namespace) -> int:
    """``trikafka audit``."""
    from .audit import audit_main

    return _run(audit_main, args)


def _run(fn, arg) -> int:
    from trikafka.client import ClientError
    from trikafka.group import ConsumerIdTakenOver, RebalanceFailedError
    from trikafka.zk import CoordinatorError

    expected = (ClientError, CoordinatorError, OSError, RebalanceFailedError, ConsumerIdTakenOver)
    try:
        return trio.run(fn, arg)
    except KeyboardInterrupt:
        return 0
    except expected as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        matched, rest = group.split(expected)
        if matched is None or rest is not None:
            raise
        for exc in matched.exceptions:
            print(f"trikafka: {exc}", file=sys.stderr)
        return 1


__all__ = ["add_audit_parser", "add_mirror_parser", "audit_command", "mirror_command"]
