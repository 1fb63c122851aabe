"""The values of the 0.7 broker registry znodes (spec §8.1-§8.3), pure and I/O-free.

``/brokers/ids/<id>`` holds ``<creatorId>:<host>:<port>``,
``/brokers/topics/<topic>/<id>`` a decimal partition count, and an offsets
node a decimal int64.  Kept apart from ``trikafka.zk.registry`` (the Trio
registration that writes them) so that readers without an event loop, such as
Spark's planners, parse them without importing Trio.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import RegistryValueError


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A parsed ``/brokers/ids/<id>`` value."""

    creator_id: str
    host: str
    port: int

    def encode(self) -> bytes:
        return f"{self.creator_id}:{self.host}:{self.port}".encode("utf-8")


def parse_broker_registration(data: bytes) -> BrokerInfo:
    """Split ``creator:host:port`` (exactly three fields, §8.2).  Raises ValueError."""
    fields = data.decode("utf-8").split(":")
    if len(fields) != 3 or not fields[1] or not fields[2].isdigit():
        raise ValueError(f"malformed broker registration {data!r}")
    return BrokerInfo(fields[0], fields[1], int(fields[2]))


def parse_partition_count(data: bytes) -> int:
    """The decimal partition count of a ``/brokers/topics/<t>/<id>`` node.  Raises ValueError."""
    text = data.decode("ascii")
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"malformed partition count {data!r}")
    return int(text)


_DECIMAL = re.compile(rb"[+-]?[0-9]+")
_INT64_MAX = 2**63 - 1


def encode_offset(offset: int) -> bytes:
    """The decimal int64 stored in an offsets node."""
    if type(offset) is not int or not 0 <= offset <= _INT64_MAX:
        raise RegistryValueError(f"offset {offset!r} is not a non-negative int64")
    return str(offset).encode("ascii")


def decode_offset(data: bytes) -> int | None:
    """The committed offset, or ``None`` (= node absent) for empty, non-numeric,
    negative or out-of-int64 data (spec §8.3 [T]; samsa writes empty nodes)."""
    raw = bytes(data)
    if not _DECIMAL.fullmatch(raw):
        return None
    value = int(raw)
    return value if 0 <= value <= _INT64_MAX else None
