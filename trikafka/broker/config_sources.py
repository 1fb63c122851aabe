"""Where broker settings come from: the 0.7 property-name table, value parsing, files.

Sources, lowest precedence first:

1. the defaults of ``BrokerConfig`` (``trikafka.broker.config``);
2. one file: TOML (``*.toml``) or a 0.7 ``server.properties`` (anything else);
3. overrides, e.g. from command-line flags.

A 0.7 property name maps to a field by replacing ``.`` with ``_``
(``log.flush.interval`` -> ``log_flush_interval``); ``brokerid`` is
``broker_id``.  TOML may use the snake_case names, the dotted 0.7 names
(quoted keys) or nested tables (``[log] dir = ...`` is ``log_dir``).
Unknown keys in a TOML file are an error, because the file is ours and a typo
there should be loud; unknown keys in a properties file only log a warning,
because real 0.7 files carry settings trikafka has no use for.  Booleans are
spelled as everywhere else (``trikafka.util.settings.parse_bool``).
"""

from __future__ import annotations

import dataclasses
import logging
import tomllib
from typing import Any, Callable, Mapping

from trikafka.util.settings import parse_bool

from .config import (
    _CLEANER_MAP_FIELDS,
    _RENAMED,
    _TOPIC_MAP_FIELDS,
    _TOPIC_TEXT_MAP_FIELDS,
    BrokerConfig,
    ConfigError,
)

# A setting as read: a properties-file string, or whatever TOML holds (str, int, bool, float, a table).
RawValue = Any
# A BrokerConfig field's value once converted: its type is the field's, which the name picks at run time.
FieldValue = Any

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- loading

_FIELDS = {f.name: f for f in dataclasses.fields(BrokerConfig)}


def field_name(key: str) -> str | None:
    """The field a 0.7 property or TOML key names, or None if there is none."""
    key = key.strip()
    name = _RENAMED.get(key, key.replace(".", "_").replace("-", "_"))
    return name if name in _FIELDS else None


def _convert(name: str, value: RawValue, *, key: str, source: str) -> FieldValue:
    """Turn a raw value (a string from a properties file, or TOML) into the field's type.

    A bad value's error names the setting as the user wrote it (``key``) and where (``source``)."""
    default = _FIELDS[name].default
    kind = _FIELDS[name].type
    try:
        if name in _TOPIC_MAP_FIELDS or name in _CLEANER_MAP_FIELDS:
            return _parse_topic_map(value)
        if name in _TOPIC_TEXT_MAP_FIELDS:
            return _parse_topic_map(value, str)
        if kind == "bool":
            return parse_bool(value)
        if kind in ("int", "int | None"):
            if value is None or (isinstance(value, str) and value.strip() == "" and kind != "int"):
                return None
            return _parse_int(value)
        if kind == "float":
            return _parse_float(value)
        if kind in ("str", "str | None"):
            return None if value is None else str(value).strip()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad value {value!r} for {key.strip()} in {source}: {exc}") from None
    raise AssertionError(f"unhandled field type {kind} for {name} (default {default!r})")


def _parse_int(value: RawValue) -> int:
    if isinstance(value, bool):
        raise ValueError("expected an integer, not a boolean")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError("expected an integer") from None


def _parse_float(value: RawValue) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number, not a boolean")
    try:
        return float(value)
    except ValueError:
        raise ValueError("expected a number") from None


def _parse_topic_map(value: RawValue, parse: Callable[[RawValue], FieldValue] = _parse_int) -> dict[str, FieldValue]:
    """``t1:8,t2:16`` (0.7's format) or a TOML table ``{t1 = 8}``."""
    if isinstance(value, Mapping):
        return {str(k): parse(v) for k, v in value.items()}
    result: dict[str, FieldValue] = {}
    for item in str(value).split(","):
        if not item.strip():
            continue
        topic, sep, count = item.rpartition(":")
        if not sep or not topic.strip():
            raise ValueError(f"{item!r} is not topic:value")
        result[topic.strip()] = parse(count.strip())
    return result


def from_mapping(values: Mapping[str, RawValue], *, base: BrokerConfig | None = None,
                 strict: bool = True, source: str = "settings") -> BrokerConfig:
    """Apply ``values`` (0.7 or snake_case keys) on top of ``base`` (default: defaults).

    ``strict`` makes an unknown key a ``ConfigError``; otherwise it is logged.
    """
    changes: dict[str, FieldValue] = {}
    for key, value in values.items():
        name = field_name(key)
        if name is None:
            if strict:
                raise ConfigError(f"unknown setting {key!r} in {source}")
            logger.warning("ignoring unknown setting %r in %s", key, source)
            continue
        changes[name] = _convert(name, value, key=key, source=source)
    base = base if base is not None else BrokerConfig()
    try:
        return dataclasses.replace(base, **changes)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _flatten_toml(table: Mapping[str, RawValue], prefix: str = "") -> dict[str, RawValue]:
    flat: dict[str, RawValue] = {}
    for key, value in table.items():
        name = f"{prefix}_{key}" if prefix else key
        if isinstance(value, Mapping) and field_name(name) is None:
            flat.update(_flatten_toml(value, name))
        else:
            flat[name] = value
    return flat


def load_toml(path: str, *, base: BrokerConfig | None = None) -> BrokerConfig:
    """Read a TOML config file (unknown keys are errors)."""
    try:
        with open(path, "rb") as f:
            table = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return from_mapping(_flatten_toml(table), base=base, strict=True, source=path)


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text: ``key=value``, ``key: value`` or ``key value``.

    Handles ``#``/``!`` comments, backslash line continuations and the common
    escapes; enough for 0.7's ``server.properties``.
    """
    result: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of backslashes continues the line
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        result[key] = value
        logical = ""
    if logical:
        key, value = _split_property(logical)
        result[key] = value
    return result


def _split_property(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line) and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest.rstrip())


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    escapes = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 6 <= len(text):
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(escapes.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def load_properties(path: str, *, base: BrokerConfig | None = None) -> BrokerConfig:
    """Read a 0.7 ``server.properties`` file (unknown keys are logged and ignored)."""
    with open(path, encoding="utf-8") as f:
        values = parse_properties(f.read())
    return from_mapping(values, base=base, strict=False, source=path)


def load_file(path: str, *, base: BrokerConfig | None = None) -> BrokerConfig:
    """TOML for ``*.toml``, a 0.7 properties file otherwise."""
    if path.endswith(".toml"):
        return load_toml(path, base=base)
    return load_properties(path, base=base)


def load(path: str | None = None, overrides: Mapping[str, RawValue] | None = None, *,
         base: BrokerConfig | None = None) -> BrokerConfig:
    """Defaults < ``path`` < ``overrides`` (keys as for ``from_mapping``; None values skipped)."""
    base = base if base is not None else BrokerConfig()
    config = load_file(path, base=base) if path else base
    if overrides:
        present = {k: v for k, v in overrides.items() if v is not None}
        config = from_mapping(present, base=config, strict=True, source="command line")
    return config
