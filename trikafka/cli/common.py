"""What the command families share: defaults, ``--broker`` parsing, the runners that print errors."""

from __future__ import annotations

import argparse
import sys

import trio

from trikafka.broker.config import DEFAULT_HOST, DEFAULT_PORT

DEFAULT_BROKER = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
DEFAULT_ZOOKEEPER = "127.0.0.1:2181"  # where `trikafka serve` starts its private ZooKeeper


def parse_broker(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``:PORT``, or ``HOST``) to a pair; default 127.0.0.1:9092."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(DEFAULT_PORT)
    try:
        return host or DEFAULT_HOST, int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {text!r}") from None


def add_broker(p: argparse.ArgumentParser) -> None:
    """The ``--broker HOST:PORT`` option of the commands that talk to one broker."""
    p.add_argument("--broker", type=parse_broker, default=parse_broker(DEFAULT_BROKER),
                   help=f"HOST:PORT (default {DEFAULT_BROKER})")


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """Every exception inside (nested) exception groups, or ``[exc]``."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaf_exceptions(inner)]
    return [exc]


def run_client_value(fn, args: argparse.Namespace):
    """``trio.run(fn, args)``; None (after a one-line error) if a broker or ZooKeeper failed."""
    from trikafka.client import ClientError
    from trikafka.zk import CoordinatorError

    try:
        return trio.run(fn, args)
    except KeyboardInterrupt:
        return None
    except (ClientError, CoordinatorError, OSError) as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return None


def run_client(fn, args: argparse.Namespace) -> int:
    """``trio.run(fn, args)`` as an exit status: interrupts and closed pipes are a clean stop."""
    from trikafka.client import ClientError

    try:
        return trio.run(fn, args)
    except KeyboardInterrupt:
        return 0  # interrupting a consumer is how it is meant to stop
    except BrokenPipeError:
        return 0  # stdout closed (e.g. piped into head)
    except (ClientError, OSError) as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return 1


def run_group_client(fn, args: argparse.Namespace) -> int:
    """Like ``run_client``, for commands that talk to ZooKeeper too."""
    from trikafka.group import ConsumerIdTakenOver, RebalanceFailedError
    from trikafka.zk import CoordinatorError

    expected = (CoordinatorError, RebalanceFailedError, ConsumerIdTakenOver)
    try:
        return run_client(fn, args)
    except expected as exc:
        print(f"trikafka: ZooKeeper at {args.zookeeper}: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        leaves = leaf_exceptions(group)
        if all(isinstance(e, expected) for e in leaves):
            for exc in leaves:
                print(f"trikafka: ZooKeeper at {args.zookeeper}: {exc}", file=sys.stderr)
            return 1
        raise
