"""The shape of a protocol's request table: one ``Api`` entry per request type (sans-I/O).

A protocol's table is a ``ProtocolTable`` subclass whose members' values are ``Api``
entries: ``requests.RequestType`` is the 0.7 protocol's.  An entry is keyed by its id and
carries a range of versions, so a versioned protocol (Apache Kafka's api keys, with their
request header versions and flexible versions) is another table of the same entries.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable

from .cursor import FieldCursor

# Body codecs: ``encode(request, version)`` gives the bytes after the request header;
# ``decode(cursor, version)`` reads them from a cursor placed after it.  ``Any``: each entry's
# codec takes and gives its own request class, which a table of many types cannot name.
BodyEncoder = Callable[[Any, int], list[bytes]]
BodyDecoder = Callable[[FieldCursor, int], Any]


@dataclass(frozen=True, slots=True)
class Api:
    """One request type of one protocol, as its ``ProtocolTable`` member's value.

    ``key`` is the id on the wire (0.7's requestType, Kafka's api_key); ``label`` names it in
    the broker's metrics.  ``min_version .. max_version`` are the versions a peer may send
    (0.7 sends none: 0 .. 0); ``flexible_from`` is the first version with flexible encoding
    (compact fields and tagged fields, request header v2), None for none.
    """

    key: int
    label: str
    request_class: type[Any]  # Any: any class can be a protocol's request
    encode: BodyEncoder
    decode: BodyDecoder
    answered: bool = True
    extension: bool = True
    min_version: int = 0
    max_version: int = 0
    flexible_from: int | None = None

    def supports(self, version: int) -> bool:
        """Whether a peer may send ``version`` of this request."""
        return self.min_version <= version <= self.max_version

    def flexible(self, version: int) -> bool:
        """Whether ``version`` of this request uses flexible encoding."""
        return self.flexible_from is not None and version >= self.flexible_from


class ProtocolTable(enum.IntEnum):
    """A protocol's request types: each member is one ``Api``, the member's int its key.

    Creating a member gives its request class a ``type`` attribute naming the member,
    so a request knows its own type (``request.type``).
    """

    api: Api

    def __new__(cls, api: Api) -> ProtocolTable:
        member = int.__new__(cls, api.key)
        member._value_ = api.key
        member.api = api
        api.request_class.type = member
        return member

    @property
    def expects_response(self) -> bool:
        """False for a request the broker never answers (0.7's PRODUCE and MULTIPRODUCE, §5.1, §5.4)."""
        return self.api.answered

    @property
    def is_extension(self) -> bool:
        """True for trikafka's types, which a plain 0.7 broker answers by closing."""
        return self.api.extension

    @property
    def label(self) -> str:
        """The ``request`` label of the broker's metrics."""
        return self.api.label
