"""The ``trikafka`` parser and ``main``: global options, then one subcommand per family module."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from trikafka.cli import audit, consume, groups, mirror, pipeline, produce, serve, topics
from trikafka.cli.logsetup import LOG_FORMATS, configure_logging

FAMILIES = (serve, produce, consume, groups, topics, mirror, audit, pipeline)  # the order `--help` lists them in


def build_parser() -> argparse.ArgumentParser:
    """The ``trikafka`` argument parser, each command family adding its own subcommand."""
    parser = argparse.ArgumentParser(prog="trikafka", description="Kafka 0.7 on Trio")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                        help="text (default) or json: one JSON object per line (ts, level, logger, msg, ...)")
    commands = parser.add_subparsers(dest="command", required=True)
    for family in FAMILIES:
        family.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``trikafka ARGV`` (default: ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["pipeline"]:  # its own parser owns every option, --help included
        return pipeline.cmd_pipeline(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    if args.command != "serve" and args.log_level.upper() == "INFO":
        logging.getLogger("kazoo").setLevel(logging.WARNING)  # connection chatter, not news to a user
    validate = getattr(args, "validate", None)
    if validate is not None:
        validate(parser, args)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
