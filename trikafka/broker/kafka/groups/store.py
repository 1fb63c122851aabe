"""Writing records to ``__consumer_offsets`` and reading a partition back (docs/protocol.md §17.3).

A write is ``InternalTopic.write``'s: one uncompressed v2 batch appended with
acks -1, returning once the batch is committed (§12.6) or failed; a read is
``InternalTopic.read``'s.  This module encodes and decodes the group records.
"""

from __future__ import annotations

from typing import Sequence

from kio.schema.errors import ErrorCode

from trikafka.kafka.group_records import RecordKey, RecordValue, decode_record, encode_key, encode_value
from trikafka.log.verification_guard import VerificationGuard

from ...engine.partition import ReadView
from ..internal_topic import InternalTopic

# key, value (None: tombstone), logical offset, and the producer id whose still-open transaction
# holds the record (None: the record counts now, §19.5.4)
LoadedRecord = tuple[RecordKey, RecordValue | None, int, int | None]


class GroupStore:
    """One broker's reads and writes of ``__consumer_offsets``."""

    def __init__(self, topic: InternalTopic):
        self._topic = topic

    async def write(self, index: int, records: Sequence[tuple[RecordKey, RecordValue | None]],
                    producer: tuple[int, int] | None = None,
                    guard: VerificationGuard | None = None) -> int | ErrorCode:
        """Append ``records`` as one batch to partition ``index`` and wait until it is committed: the
        logical offset of the first record, or the error the client is answered (§17.3); with
        ``producer`` (id, epoch) a transactional batch of that producer (§19.5.4), presenting its
        verification's ``guard`` (§19.5.7)."""
        return await self._topic.write(index, [(encode_key(key), encode_value(value)) for key, value in records],
                                       producer, guard)

    async def read(self, view: ReadView) -> list[LoadedRecord]:
        """Every record of a partition from its log start to its log end, in order (§17.3)."""
        return await self._topic.read(view, decode_record)
