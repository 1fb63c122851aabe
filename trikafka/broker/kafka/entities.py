"""Building one version's response entities from keyword fields (docs/protocol.md §16.3).

kio generates one dataclass per api, version and nesting level; a field that
a version lacks is absent from its class.  Handlers build answers with every
field they know, and ``Reply`` keeps those the request's version has, so one
handler serves every version of its api.
"""

from __future__ import annotations

import dataclasses
import datetime
from functools import lru_cache
from types import ModuleType
from typing import Any, NamedTuple

from kio.index import load_payload_module
from kio.static.constants import EntityType

NO_THROTTLE = datetime.timedelta(0)
CONFIG_SOURCE_TOPIC = 1  # DescribeConfigs' DYNAMIC_TOPIC_CONFIG
CONFIG_SOURCE_BROKER = 2  # DescribeConfigs' DYNAMIC_BROKER_CONFIG (§20.4)
CONFIG_SOURCE_DEFAULT_BROKER = 3  # DescribeConfigs' DYNAMIC_DEFAULT_BROKER_CONFIG (§20.4)
CONFIG_SOURCE_STATIC = 4  # DescribeConfigs' STATIC_BROKER_CONFIG
CONFIG_SOURCE_DEFAULT = 5  # DescribeConfigs' DEFAULT_CONFIG


class ConfigRow(NamedTuple):
    """One setting as DescribeConfigs lists it (§16.4); ``synonyms`` are (name, value, source), most
    specific first."""

    name: str
    value: str
    read_only: bool
    source: int
    synonyms: tuple[tuple[str, str, int], ...]

    @property
    def is_default(self) -> bool:
        return self.source == CONFIG_SOURCE_DEFAULT


def kio_time(ms: int) -> datetime.datetime | None:
    """A Kafka timestamp in ms as kio's time fields take it: timezone-aware, or None for -1."""
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


@lru_cache(maxsize=None)
def _module(api_key: int, version: int) -> ModuleType:
    return load_payload_module(api_key, version, EntityType.response)


@lru_cache(maxsize=None)
def _response_class(api_key: int, version: int) -> type:
    """The top-level response class of ``_module(api_key, version)``: every answer needs it."""
    return next(c for c in vars(_module(api_key, version)).values()
                if getattr(c, "__type__", None) is EntityType.response)


@lru_cache(maxsize=None)
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


class Reply:
    """The response classes of one (api key, version)."""

    __slots__ = ("_module", "_response")

    def __init__(self, api_key: int, version: int):
        self._module = _module(api_key, version)
        self._response = _response_class(api_key, version)

    # Any: the entity's class depends on the version, which only the request knows at run time.
    def response(self, **fields: Any) -> Any:
        """The top-level response, with the fields this version has."""
        return _build(self._response, fields)

    def nested(self, class_name: str, /, **fields: Any) -> Any:
        """A nested entity of this version's schema, by class name."""
        return _build(getattr(self._module, class_name), fields)


def _build(cls: type, fields: dict[str, Any]) -> Any:
    names = _field_names(cls)
    return cls(**{k: v for k, v in fields.items() if k in names})
