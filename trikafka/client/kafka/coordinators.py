"""Finding a coordinator (docs/protocol.md §17.1, §19.5.1): one FindCoordinator through any broker,
for a group or a transactional id.  The request's values and the answer's reading are
``membership``'s (sans I/O); callers decide how to retry."""

from __future__ import annotations

from .client import BrokerNode, KafkaClient
from .errors import KafkaResponseError
from .membership import COORDINATOR_KEY_TYPE_GROUP, coordinator_of, find_coordinator_values, group_api


async def find_coordinator(client: KafkaClient, key: str, key_type: int = COORDINATOR_KEY_TYPE_GROUP, *,
                           what: str | None = None) -> BrokerNode:
    """The coordinator of ``key``, asked of any broker; ``KafkaResponseError`` with the answer's code
    (about ``what``, by default the key) when it names none."""
    connection = await client.any_connection()
    code, node = coordinator_of(await connection.request(group_api("FIND_COORDINATOR"), extra_wait_s=0.0,
                                                         **find_coordinator_values(key, key_type)))
    if node is None:
        raise KafkaResponseError(code, what or f"coordinator of {key}")
    return node
