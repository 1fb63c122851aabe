"""``trikafka audit``: producers' audit counts against what each cluster holds (logic in ``trikafka.mirror``)."""

from __future__ import annotations

from trikafka.mirror.commands import add_audit_parser


def add_parser(commands) -> None:
    """Register ``audit`` on the ``trikafka`` subparsers."""
    add_audit_parser(commands)
