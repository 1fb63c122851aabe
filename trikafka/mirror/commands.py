"""Entry points of ``trikafka mirror`` and ``trikafka audit``: functions taking the parsed
``Namespace`` (their parsers are in ``trikafka.cli.mirror`` and ``trikafka.cli.audit``)."""

from __future__ import annotations

import argparse
import signal
import sys

import trio

from .mirror import MirrorConfig, MirrorStats, run_mirror


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
    count = stats.total_messages
    print(f"trikafka: mirrored {count} message{'' if count == 1 else 's'}", file=sys.stderr, flush=True)
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
    from trikafka.zk import ZooKeeperClientError

    expected = (ClientError, ZooKeeperClientError, OSError, RebalanceFailedError, ConsumerIdTakenOver)
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
        for error in matched.exceptions:
            print(f"trikafka: {error}", file=sys.stderr)
        return 1


__all__ = ["audit_command", "mirror_command"]
