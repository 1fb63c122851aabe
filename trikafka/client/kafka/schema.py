"""Request bodies of any served version from one set of values (docs/protocol.md §16.3), sans I/O.

A Kafka request's fields change between versions; ``kio`` has one class per
version.  ``build`` fills the class of the negotiated version from plain
values: a field the version lacks is dropped, a field the caller leaves out
keeps the schema's default, and a list of dicts for a field of nested
entities becomes a tuple of that version's nested class.  Responses are read
with ``field``, which answers a default for a field the version lacks.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Mapping

from kio.static.protocol import Entity, RequestPayload

from trikafka.kafka.apis import KafkaApi

# Any: a value of a kio field is whatever that field's type is (ints, strings, tuples of entities).
Values = Mapping[str, Any]


def build(api: KafkaApi, version: int, **values: Any) -> RequestPayload:
    """The body of ``api`` at ``version`` holding ``values`` (nested entities as dicts)."""
    body = _entity(api.request_class(version), values)
    return typing.cast(RequestPayload, body)


def entity(cls: type[Entity], **values: Any) -> Entity:
    """An entity of ``cls`` (a request, a response, a nested entity) holding ``values`` as ``build`` does."""
    return _entity(cls, values)


def field(entity: object, name: str, default: Any = None) -> Any:
    """``entity.name``, or ``default`` where this version of the schema has no such field."""
    return getattr(entity, name, default)


def _entity(cls: type[Entity], values: Values) -> Entity:
    kept = {}
    for name, nested in _fields(cls).items():
        if name not in values:
            continue
        value = values[name]
        if nested is not None and value is not None:
            value = tuple(_entity(nested, item) if isinstance(item, Mapping) else item for item in value)
        kept[name] = value
    return cls(**kept)


@functools.cache
def _fields(cls: type[Entity]) -> dict[str, type[Entity] | None]:
    """Each field of ``cls`` and the nested entity class of its elements, if it holds entities."""
    return {f.name: _nested_class(f.type) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]


def _nested_class(annotation: object) -> type[Entity] | None:
    """The entity class inside ``tuple[X, ...]`` or ``tuple[X, ...] | None``, else None."""
    if isinstance(annotation, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _nested_class(arg)
            if found is not None:
                return found
        return None
    if typing.get_origin(annotation) is tuple:
        args = typing.get_args(annotation)
        if args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
            return typing.cast(type[Entity], args[0])
    return None
