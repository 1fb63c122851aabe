"""A small blocking Kafka-protocol connection for Spark planners and tasks (plain ``socket``).

Spark runs ``read()`` as a plain generator in a worker process, so rows
cannot be yielded out of ``trio.run``.  This connection sends one request at
a time and reads its answer before the next; every byte is encoded and
decoded by ``trikafka.kafka.framing`` (request bodies built by
``trikafka.client.kafka.schema``), and versions are negotiated with
ApiVersions v0 by the Trio client's ``shared_versions``.  Any socket error,
early close or malformed frame closes it and raises ``BrokerConnectionError``.
"""

from __future__ import annotations

import socket
from typing import Any

from kio.schema.errors import ErrorCode

from trikafka.client.errors import BrokerConnectionError, BrokerProtocolError
from trikafka.client.kafka import schema
from trikafka.client.kafka.connection import DEFAULT_MAX_RESPONSE_BYTES, shared_versions
from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.errors import KafkaCodecError
from trikafka.kafka.framing import FrameReader, decode_response, encode_request

CLIENT_ID = "trikafka-spark"
_RECEIVE_BYTES = 1 << 20


class BlockingKafkaConnection:
    """One Kafka-protocol connection to ``host:port``; ``with`` closes it."""

    def __init__(self, host: str, port: int, *, timeout_s: float):
        self.address = (host, port)
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise BrokerConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        self._reader = FrameReader(DEFAULT_MAX_RESPONSE_BYTES)
        self._correlation_id = 0
        self.versions: dict[KafkaApi, int] = {}
        try:
            # Any: an ApiVersionsResponse v0 (kio's class), read for its entries only.
            answer: Any = self.send(KafkaApi.API_VERSIONS, 0, schema.build(KafkaApi.API_VERSIONS, 0))
            if answer.error_code != ErrorCode.none:
                raise BrokerProtocolError(f"{self._peer()}: ApiVersions answered {answer.error_code!r}")
            self.versions = shared_versions(
                (int(e.api_key), int(e.min_version), int(e.max_version)) for e in answer.api_keys)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> BlockingKafkaConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def request(self, api: KafkaApi, **values: object) -> Any:
        """``api`` at the negotiated version with body ``values`` (``schema.build``); its decoded answer.

        Any: kio's response class of whichever version was negotiated; read with ``schema.field``.
        """
        version = self.versions.get(api)
        if version is None:
            raise BrokerProtocolError(f"{self._peer()} serves no version of {api.label} this client speaks")
        return self.send(api, version, schema.build(api, version, **values))

    def send(self, api: KafkaApi, version: int, body: object) -> Any:
        """Send one request body of ``api`` v``version`` and read its answer."""
        correlation_id = self._correlation_id
        self._correlation_id = (correlation_id + 1) % (1 << 31)
        frame = encode_request(int(api), version, correlation_id, CLIENT_ID, body)  # type: ignore[arg-type]
        try:
            self._sock.sendall(frame)
            while (answer := self._reader.next_frame()) is None:
                data = self._sock.recv(_RECEIVE_BYTES)
                if not data:
                    raise BrokerConnectionError(f"{self._peer()} closed the connection")
                self._reader.feed(data)
            answered_id, decoded = decode_response(int(api), version, answer)
        except OSError as exc:
            self.close()
            raise BrokerConnectionError(f"{self._peer()}: {exc}") from exc
        except (KafkaCodecError, BrokerConnectionError) as exc:
            self.close()
            raise BrokerProtocolError(f"{self._peer()}: {exc}") from None
        if answered_id != correlation_id:
            self.close()
            raise BrokerProtocolError(f"{self._peer()}: answer to correlation id {answered_id}, "
                                      f"expected {correlation_id}")
        return decoded

    def _peer(self) -> str:
        return f"broker {self.address[0]}:{self.address[1]}"
