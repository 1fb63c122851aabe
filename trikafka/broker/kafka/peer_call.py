"""One Kafka-protocol request from this broker to another's Kafka listener (docs/protocol.md §19.6, §18.5).

The transaction coordinator reaches partition leaders on other brokers
(WriteTxnMarkers), and leaders reach coordinators (AddPartitionsToTxn
``verify_only``), over the same codec clients use.  A call runs on a
connection ``PeerConnections`` keeps from an earlier call to the same peer,
or on a new one its ``PeerConnector`` opens (TCP or TLS, logged in with SASL
where the listener asks).  A kept connection the peer closed meanwhile fails
before any answer, and the call is sent once more on a new one: both apis are
safe to repeat (§18.5).
"""

from __future__ import annotations

import struct
from typing import Protocol

import trio
from kio.static.protocol import RequestPayload, ResponsePayload

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.errors import KafkaCodecError
from trikafka.kafka.framing import decode_response, encode_request
from trikafka.wire.metadata import BrokerAddress

CLIENT_ID = "trikafka-broker"
PEER_CALL_TIMEOUT_S = 30.0
_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 16 << 20  # a peer's answer to these small requests is far below this
CLOSED = "the peer closed the connection"


class PeerCallError(Exception):
    """The peer could not be reached, refused the login, or answered something that is not the api's response."""


class PeerClosed(PeerCallError):
    """The peer closed the connection before its answer was whole."""


class PeerStream:
    """One connection to another broker's Kafka listener: each request answered before the next is sent."""

    def __init__(self, stream: trio.abc.Stream, address: BrokerAddress):
        self._stream = stream
        self.address = address
        self._correlation_id = 0

    async def request(self, api: KafkaApi, version: int, body: RequestPayload) -> ResponsePayload:
        """Send ``body``; its decoded answer, or ``PeerCallError`` when the answer is not one."""
        self._correlation_id += 1
        await self._stream.send_all(encode_request(int(api), version, self._correlation_id, CLIENT_ID, body))
        (size,) = _SIZE.unpack(await self._receive(_SIZE.size))
        if not 0 < size <= MAX_RESPONSE_BYTES:
            raise PeerCallError(f"an answer frame of {size} bytes")
        try:
            answered_id, answer = decode_response(int(api), version, await self._receive(size))
        except KafkaCodecError as exc:
            raise PeerCallError(f"a malformed {api.label} answer: {exc}") from None
        if answered_id != self._correlation_id:
            raise PeerCallError(f"{api.label} answered with correlation id {answered_id}")
        return answer

    async def _receive(self, n: int) -> bytes:
        got = bytearray()
        while len(got) < n:
            chunk = await self._stream.receive_some(n - len(got))
            if not chunk:
                raise PeerClosed(CLOSED)
            got += chunk
        return bytes(got)

    async def aclose(self) -> None:
        """Close the connection at once, without waiting on the peer."""
        await trio.aclose_forcefully(self._stream)


class Connector(Protocol):
    """Opens a connection to another broker's Kafka listener, ready for a request (``peer_connector.PeerConnector``)."""

    async def connect(self, address: BrokerAddress) -> PeerStream:
        """The connection; raises ``PeerCallError``, ``OSError`` or ``trio.BrokenResourceError``."""


class Connections(Protocol):
    """Where a call takes a connection and gives it back once answered (``peer_connections.PeerConnections``)."""

    async def take(self, address: BrokerAddress) -> tuple[PeerStream, bool]:
        """A connection to ``address``, and whether an earlier call kept it; raises as ``Connector.connect``."""

    async def give_back(self, stream: PeerStream) -> None:
        """``stream``'s call was answered: keep it for the next call, or close it."""


async def peer_call(connections: Connections, address: BrokerAddress, api: KafkaApi, version: int,
                    body: RequestPayload, *, timeout_s: float = PEER_CALL_TIMEOUT_S) -> ResponsePayload:
    """Send ``body`` to the Kafka listener at ``address`` over a kept or new connection of ``connections``;
    its decoded answer.  Raises ``PeerCallError`` naming the api, the peer and the reason (one line)."""
    where = f"{api.label} to broker {address.broker_id} at {address.host}:{address.port}"
    try:
        with trio.fail_after(timeout_s):
            while True:
                peer, kept = await connections.take(address)
                try:
                    answer = await peer.request(api, version, body)
                except BaseException as exc:
                    await peer.aclose()
                    if kept and isinstance(exc, (PeerClosed, trio.BrokenResourceError, OSError)):
                        continue  # the peer closed a kept connection: once more on a new one (``kept`` False)
                    raise
                await connections.give_back(peer)
                return answer
    except PeerCallError as exc:
        raise PeerCallError(f"{where}: {exc}") from None
    except trio.TooSlowError:
        raise PeerCallError(f"{where}: no answer within {timeout_s:g} s") from None
    except trio.BrokenResourceError as exc:  # a failed handshake's names OpenSSL's reason; a lost stream's nothing
        raise PeerCallError(f"{where}: {str(exc) or CLOSED}") from None
    except OSError as exc:
        raise PeerCallError(f"{where}: {exc}") from None
