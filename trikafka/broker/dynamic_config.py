"""Dynamic broker settings (docs/protocol.md §20.4): the settings a running broker applies when
Alter*Configs change them, kept as the entities ``brokers/<id>`` and ``brokers/<default>`` (§20.1).

``BrokerSettings`` computes the settings in force from the static ones and
the two levels, most specific first, and tells its listeners (the log
manager, the cleaner, the topic overrides, the Kafka listener, replication)
of each change.  The composition root builds it before the Kafka listener
and replication and gives it to both: each adds its own listener as it is
built.  The keys that may change are ``config.DYNAMIC_SETTINGS``.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Mapping

from .config import DYNAMIC_SETTINGS, BrokerConfig, ConfigError
from .config_sources import field_name, from_mapping
from .entity_configs import DEFAULT_NAME
from .kafka.entities import (CONFIG_SOURCE_BROKER, CONFIG_SOURCE_DEFAULT, CONFIG_SOURCE_DEFAULT_BROKER,
                             CONFIG_SOURCE_STATIC, ConfigRow)

logger = logging.getLogger(__name__)

DEFAULT_BROKER_ENTITY = f"brokers/{DEFAULT_NAME}"
_BUILT_IN = BrokerConfig()
# Read-only settings DescribeConfigs lists beside the dynamic ones: Kafka's name -> the field.
READ_ONLY_SETTINGS = {"broker.id": "broker_id", "message.max.bytes": "max_message_size",
                      "num.partitions": "num_partitions", "log.dirs": "log_dir"}


def broker_entity(resource_name: str) -> str:
    """The entity path of a broker resource's name (``""``: the default); ConfigError for another name."""
    if resource_name == "":
        return DEFAULT_BROKER_ENTITY
    if not resource_name.isdigit():
        raise ConfigError(f"broker resource {resource_name!r}: a broker id or \"\" (the default) is needed")
    return f"brokers/{int(resource_name)}"


def check_dynamic_key(key: str) -> None:
    """ConfigError unless ``key`` is a broker setting that may change at run time."""
    if key in DYNAMIC_SETTINGS:
        return
    if field_name(key) is None:
        raise ConfigError(f"unknown broker config {key!r}")
    raise ConfigError(f"broker config {key!r} cannot change at run time: the broker reads it at start "
                      f"(dynamic: {', '.join(DYNAMIC_SETTINGS)})")


def text(config: BrokerConfig, field: str) -> str:
    """A field's value as DescribeConfigs shows it."""
    value = getattr(config, field)
    if field == "log_retention_ms" and value is None:
        return str(config.retention_ms)
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


class BrokerSettings:
    """This broker's settings in force: static ones under the dynamic levels (§20.4)."""

    def __init__(self, static: BrokerConfig, listeners: Iterable[Callable[[BrokerConfig], None]] = ()):
        self.static = static
        self.current = static
        self.levels: tuple[dict[str, str], dict[str, str]] = ({}, {})  # (this broker's, the default)
        # Told of each change, the new settings, in order: the root's first, then each object given
        # these settings, as it was built.
        self.listeners: list[Callable[[BrokerConfig], None]] = list(listeners)

    def own_entity(self) -> str:
        return f"brokers/{self.static.broker_id}"

    def _levels_of(self, entities: Mapping[str, Mapping[str, str]]) -> tuple[dict[str, str], dict[str, str]]:
        return dict(entities.get(self.own_entity(), {})), dict(entities.get(DEFAULT_BROKER_ENTITY, {}))

    def check(self, entities: Mapping[str, Mapping[str, str]]) -> None:
        """ConfigError naming the first key of ``entities``' two levels that is not dynamic or does not check."""
        own, default = self._levels_of(entities)
        for level in (default, own):
            for key in level:
                check_dynamic_key(key)
        from_mapping(own, base=from_mapping(default, base=self.static, source="the default broker settings"),
                     source="this broker's settings")

    def apply(self, entities: Mapping[str, Mapping[str, str]]) -> None:
        """Put ``entities``' two levels in force (a key that does not check is logged and skipped)."""
        own, default = self._levels_of(entities)
        config = self.static
        for source, level in (("brokers/<default>", default), (self.own_entity(), own)):
            for key, value in sorted(level.items()):
                try:
                    check_dynamic_key(key)
                    config = from_mapping({key: value}, base=config, source=source)
                except ConfigError as exc:
                    logger.error("dynamic broker setting skipped: %s", exc)
        self.levels = (own, default)
        if config == self.current:
            return
        self.current = config
        logger.info("dynamic broker settings in force: this broker's %s, the default's %s", own or "none",
                    default or "none")
        for listener in self.listeners:
            listener(config)

    def level_source(self, name: str) -> int | None:
        """The source of the dynamic level that sets ``name`` for this broker (§20.4), None: neither."""
        own, default = self.levels
        return (CONFIG_SOURCE_BROKER if name in own else CONFIG_SOURCE_DEFAULT_BROKER if name in default
                else None)

    def describe(self, resource_name: str, keys: tuple[str, ...] | None) -> list[ConfigRow]:
        """DescribeConfigs of a broker resource: ``""`` the default level, else this broker's settings."""
        own, default = self.levels
        if resource_name == "":
            own = {}
        rows = []
        for name, field in DYNAMIC_SETTINGS.items():
            if keys is not None and name not in keys:
                continue
            static = text(self.static, field)
            static_source = CONFIG_SOURCE_DEFAULT if static == text(_BUILT_IN, field) else CONFIG_SOURCE_STATIC
            synonyms = tuple((name, level[name], source) for level, source in
                             ((own, CONFIG_SOURCE_BROKER), (default, CONFIG_SOURCE_DEFAULT_BROKER)) if name in level)
            synonyms += ((name, static, static_source),)
            rows.append(ConfigRow(name, synonyms[0][1], False, synonyms[0][2], synonyms))
        for name, field in READ_ONLY_SETTINGS.items():
            if keys is not None and name not in keys:
                continue
            value = text(self.static, field)
            source = CONFIG_SOURCE_DEFAULT if value == text(_BUILT_IN, field) else CONFIG_SOURCE_STATIC
            rows.append(ConfigRow(name, value, True, source, ((name, value, source),)))
        return rows
