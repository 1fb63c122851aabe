"""``trikafka mirror``: copy topics of source clusters into a target cluster (logic in ``trikafka.mirror``)."""

from __future__ import annotations

from trikafka.mirror.commands import add_mirror_parser


def add_parser(commands) -> None:
    """Register ``mirror`` on the ``trikafka`` subparsers."""
    add_mirror_parser(commands)
