"""Parsing of setting values shared by every configuration table.

Broker properties, producer and group consumer properties, per-topic
replication settings and Spark source options all spell booleans the same
way, so they share this one parser.
"""

from __future__ import annotations

from typing import Any


def parse_bool(value: Any) -> bool:
    """``true`` or ``false`` in any case, surrounding blanks ignored; a Python bool as is.

    The one boolean rule for every setting.  Anything else (``yes``, ``1``,
    ``on``, an empty string) raises ``ValueError`` with a one-line reason rather
    than guessing: 0.7 read any word but ``true`` as false, which silently turned
    a typo into "off".
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
    raise ValueError(f"expected true or false, got {value!r}")
