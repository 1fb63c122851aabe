"""The ``trikafka`` parser and ``main``: global options, then one subcommand per family module."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from trikafka import __version__
from trikafka.cli import (acls, audit, cluster, consume, groups, mirror, pipeline, produce, serve, sim, topics,
                          transactions, users)
from trikafka.cli.common import resolve_broker, resolve_zookeeper
from trikafka.cli.logsetup import LOG_FORMATS, configure_logging

# the order `--help` lists them in
FAMILIES = (serve, produce, consume, groups, transactions, topics, users, acls, cluster, mirror, audit, pipeline, sim)


def build_parser() -> argparse.ArgumentParser:
    """The ``trikafka`` argument parser, each command family adding its own subcommand."""
    parser = argparse.ArgumentParser(prog="trikafka", description="Kafka 0.7 on Trio")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_global_options(parser, defaults=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for family in FAMILIES:
        family.add_parser(commands)
    for name, sub in commands.choices.items():
        if name != "pipeline":  # its own parser owns every option
            _add_global_options(sub, defaults=False)
    return parser


def _add_global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """``--log-level`` and ``--log-format``, before or after the subcommand.

    On a subcommand they default to SUPPRESS, so a value given before the
    subcommand is not overwritten by the subcommand's default.
    """
    parser.add_argument("--log-level", metavar="LEVEL", default="INFO" if defaults else argparse.SUPPRESS,
                        help="logging level: DEBUG, INFO, WARNING, ERROR (default INFO; DEBUG also "
                             "shows ZooKeeper client retries)")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="text" if defaults else argparse.SUPPRESS,
                        help="text (default) or json: one JSON object per line (ts, level, logger, msg, ...)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``trikafka ARGV`` (default: ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["pipeline"]:  # its own parser owns every option, --help included
        return pipeline.cmd_pipeline(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        configure_logging(args.log_level, args.log_format)
    except ValueError as exc:
        parser.error(f"--log-level: {exc}")
    if args.command != "serve" and args.log_level.upper() != "DEBUG":
        # kazoo logs each failed connection attempt; the command prints one clear line instead.
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    resolve_zookeeper(args)
    resolve_broker(args)
    validate = getattr(args, "validate", None)
    if validate is not None:
        validate(parser, args)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
