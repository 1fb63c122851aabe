"""Blocks of producer ids in ZooKeeper (docs/protocol.md §19.1).

``/trikafka/producer-ids`` holds ``{"next": N, "version": 1}``: no broker has
taken an id at or above ``N``.  A broker takes ``[N, N + size)`` by a versioned
write of ``N + size``; a broker that loses the race reads again.
"""

from __future__ import annotations

import json

from . import paths
from .client import ZooKeeperClient
from .errors import BadVersionError, NodeExistsError, NoNodeError, RegistryValueError

VERSION = 1


def encode_next(next_id: int) -> bytes:
    return json.dumps({"next": next_id, "version": VERSION}, separators=(",", ":"), sort_keys=True).encode()


def decode_next(data: bytes) -> int:
    """The ``next`` of the znode's value; ``RegistryValueError`` for a value this version cannot read."""
    try:
        found = json.loads(data)["next"]
    except (ValueError, KeyError, TypeError) as exc:
        raise RegistryValueError(f"{paths.PRODUCER_IDS} holds {data[:60]!r}: {exc}") from None
    if not isinstance(found, int) or found < 0:
        raise RegistryValueError(f"{paths.PRODUCER_IDS} holds next={found!r}")
    return found


async def take_block(zk: ZooKeeperClient, size: int) -> int:
    """Take the next ``size`` producer ids for this broker; the first of them."""
    while True:
        try:
            data, stat = await zk.get(paths.PRODUCER_IDS)
        except NoNodeError:
            try:
                await zk.create(paths.PRODUCER_IDS, encode_next(size), makepath=True)
                return 0
            except NodeExistsError:
                continue
        start = decode_next(data)
        try:
            await zk.set(paths.PRODUCER_IDS, encode_next(start + size), version=stat.version)
            return start
        except BadVersionError:
            continue
