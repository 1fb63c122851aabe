"""Parsing of setting values shared by every configuration table.

Broker properties, producer and group consumer properties, per-topic
replication settings and Spark source options all spell booleans the same
way, so they share this one parser; a password setting is read one way too
(``read_secret``).
"""

from __future__ import annotations

import os
from typing import Any, Mapping


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


def read_secret(path: str | None, variable: str, environ: Mapping[str, str] | None = None) -> str:
    """A password setting's value: the first line of the file ``path`` names (without its line
    end), else the environment variable ``variable`` (``environ``: ``os.environ``); "" when neither
    gives one.  Passwords never travel on a command line.  Raises ``OSError`` for an unreadable
    file (blocking: the caller decides where it runs)."""
    if path:
        with open(path, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")
    return (os.environ if environ is None else environ).get(variable, "")
