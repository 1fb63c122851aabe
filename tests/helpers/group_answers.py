"""Scripted coordinator answers and the request a group membership sends, for its state-machine tests (§17.8)."""

from __future__ import annotations

import datetime
from typing import Protocol

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from trikafka.client.kafka import schema
from trikafka.client.kafka.membership import GroupRequest

FIND_COORDINATOR = 10


class Polled(Protocol):
    def poll(self, now_s: float) -> GroupRequest | None: ...


def answer(api_key: int, version: int, **values: object) -> object:
    """A ``kio`` response body of ``api_key`` at ``version``."""
    return schema.entity(load_response_schema(api_key, version), throttle_time=datetime.timedelta(0), **values)


def found(version: int = 4, code: ErrorCode = ErrorCode.none) -> object:
    """FindCoordinator's answer at ``version``: broker 2, broker-2:9092."""
    where = {"node_id": 2, "host": "broker-2", "port": 9092, "error_code": code, "error_message": None}
    if version >= 4:
        return answer(FIND_COORDINATOR, version, coordinators=[{"key": "g", **where}])
    return answer(FIND_COORDINATOR, version, **where)


def sent(membership: Polled, now_s: float) -> GroupRequest:
    """The request ``membership`` sends at ``now_s`` (there must be one)."""
    request = membership.poll(now_s)
    assert request is not None
    return request
