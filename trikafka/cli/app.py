"""The ``trikafka`` parser and ``main``: global options, then one subcommand per family module.

``COMMANDS`` is the table of subcommands: the module that registers each and its one-line help.
``main`` imports only the module of the command it runs (``trikafka --version`` imports none), so a
command pays only for what it uses; ``trikafka --help`` lists every command from the table.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import NamedTuple, Sequence

from trikafka import __version__
from trikafka.cli.logsetup import LOG_FORMATS, configure_logging


class Command(NamedTuple):
    """A subcommand: the module whose ``add_parser(commands)`` registers it, and its one-line help."""

    module: str
    help: str


# in the order `--help` lists them
COMMANDS: dict[str, Command] = {
    "serve": Command("trikafka.cli.serve", "run a broker"),
    "produce": Command("trikafka.cli.produce", "send stdin lines as messages"),
    "consume": Command("trikafka.cli.consume", "print messages, one per line"),
    "groups": Command("trikafka.cli.groups", "list consumer groups, or show one: members, owners, committed "
                                             "offsets, log ends and lag"),
    "transactions": Command("trikafka.cli.transactions", "list the transactional ids of the Kafka listener, or "
                                                         "show one: state, producer, open partitions"),
    "topics": Command("trikafka.cli.topics", "list a broker's topics, show named topics' offsets, or `topics "
                                             "create NAME`"),
    "users": Command("trikafka.cli.users", "SASL users (SCRAM credentials) of the Kafka listener"),
    "acls": Command("trikafka.cli.acls", "add, remove or list the ACLs of the Kafka listener (authorizer=acl)"),
    "cluster": Command("trikafka.cli.cluster", "the cluster's brokers, controller, and under-replicated or "
                                               "offline partitions"),
    "mirror": Command("trikafka.cli.mirror", "copy topics of source clusters into a target cluster, at least "
                                             "once; runs until SIGINT/SIGTERM"),
    "audit": Command("trikafka.cli.audit", "compare producers' audit counts with what each cluster holds"),
    "pipeline": Command("trikafka.cli.pipeline", "the page-view pipeline on Spark: generate | load (needs "
                                                 "trikafka[spark]; --help for more)"),
    "sim": Command("trikafka.cli.sim", "simulate a replicated cluster under faults from a seed, and check its "
                                       "promises"),
}
# the global options that take a value (``--log-level LEVEL``), skipped when looking for the command
_VALUED_GLOBALS = ("--log-level", "--log-format")


class Parser(argparse.ArgumentParser):
    """Every ``trikafka`` parser and subparser: an option is spelled out whole, never abbreviated
    (``--form`` is no ``--format``)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)


class _Commands:
    """The subparsers as a family module sees them: ``add_parser(name, ...)`` with the table's help."""

    def __init__(self, subparsers: argparse._SubParsersAction) -> None:
        self._subparsers = subparsers

    def add_parser(self, name: str, **kwargs) -> argparse.ArgumentParser:
        return self._subparsers.add_parser(name, help=COMMANDS[name].help, **kwargs)


def build_parser(command: str | None = None, *, every: bool = True) -> argparse.ArgumentParser:
    """The ``trikafka`` argument parser.

    ``command``'s family module registers its own subcommand; with ``every`` (the default, and only
    when no ``command`` is given) every family does; the others are placeholders from ``COMMANDS``,
    enough to list them and to name the choices.
    """
    parser = Parser(prog="trikafka", description="Kafka 0.7 on Trio")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_global_options(parser, defaults=True)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    commands = _Commands(subparsers)
    for name, entry in COMMANDS.items():
        if name == command or (every and command is None):
            importlib.import_module(entry.module).add_parser(commands)
            if name != "pipeline":  # its own parser owns every option
                _add_global_options(subparsers.choices[name], defaults=False)
        else:
            subparsers.add_parser(name, help=entry.help, add_help=False)
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


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (the first word after the global options), or None when there
    is none or a top-level ``--help``/``--version`` comes first."""
    words = iter(argv)
    for word in words:
        if word in _VALUED_GLOBALS:
            next(words, None)
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
        elif not word.startswith(_VALUED_GLOBALS):
            return None  # --help, --version, or an unknown option: the top-level parser answers
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``trikafka ARGV`` (default: ``sys.argv[1:]``); returns the exit status.

    A closed stdout (``trikafka topics | head``) ends any command quietly with status 0.
    """
    try:
        status = _run(list(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()  # here, not at exit, where a closed pipe could only be reported
        return status
    except BrokenPipeError:
        return _stdout_closed()
    except BaseExceptionGroup as group:  # the same, raised inside a nursery
        from trikafka.util.errors import leaf_exceptions

        if all(isinstance(e, (BrokenPipeError, KeyboardInterrupt)) for e in leaf_exceptions(group)):
            return _stdout_closed()
        raise


def _stdout_closed() -> int:
    """Point stdout at /dev/null, so what is still buffered is not written (and fails) at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


def _run(argv: list[str]) -> int:
    command = command_of(argv)
    if command == "pipeline" and argv[:1] == ["pipeline"]:  # its own parser owns every option, --help included
        from trikafka.cli.pipeline import cmd_pipeline

        return cmd_pipeline(argv[1:])
    parser = build_parser(command, every=False)
    args = parser.parse_args(argv)
    try:
        configure_logging(args.log_level, args.log_format)
    except ValueError as exc:
        parser.error(f"--log-level: {exc}")
    if args.command != "serve" and args.log_level.upper() != "DEBUG":
        # kazoo logs each failed connection attempt; the command prints one clear line instead.
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    from trikafka.cli.common import resolve_broker, resolve_zookeeper

    resolve_zookeeper(args)
    resolve_broker(args)
    validate = getattr(args, "validate", None)
    if validate is not None:
        validate(parser, args)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
