"""One Kafka-protocol request from this broker to another's Kafka listener (docs/protocol.md §19.6).

The transaction coordinator reaches partition leaders on other brokers
(WriteTxnMarkers), and leaders reach coordinators (AddPartitionsToTxn
``verify_only``), over the same codec clients use.  One connection a call:
these requests are few (one per transaction and leader), and a broker never
keeps a connection to a peer that may have died.
"""

from __future__ import annotations

import struct

import trio
from kio.static.protocol import RequestPayload, ResponsePayload

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import decode_response, encode_request
from trikafka.wire.metadata import BrokerAddress

CLIENT_ID = "trikafka-broker"
PEER_CALL_TIMEOUT_S = 30.0
_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 16 << 20  # a peer's answer to these small requests is far below this


class PeerCallError(Exception):
    """The peer could not be reached, or answered something that is not the api's response."""


async def peer_call(address: BrokerAddress, api: KafkaApi, version: int, body: RequestPayload, *,
                    timeout_s: float = PEER_CALL_TIMEOUT_S) -> ResponsePayload:
    """Send ``body`` to the Kafka listener at ``address``; its decoded answer."""
    try:
        with trio.fail_after(timeout_s):
            stream = await trio.open_tcp_stream(address.host, address.port)
            async with stream:
                await stream.send_all(encode_request(int(api), version, 1, CLIENT_ID, body))
                (size,) = _SIZE.unpack(await _receive(stream, _SIZE.size))
                if not 0 < size <= MAX_RESPONSE_BYTES:
                    raise PeerCallError(f"broker {address.broker_id} answered a frame of {size} bytes")
                _, answer = decode_response(int(api), version, await _receive(stream, size))
                return answer
    except (OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
        raise PeerCallError(f"{api.label} to broker {address.broker_id} at {address.host}:{address.port}: "
                            f"{exc!r}") from None


async def _receive(stream: trio.abc.Stream, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = await stream.receive_some(n - len(got))
        if not chunk:
            raise PeerCallError("the peer closed the connection")
        got += chunk
    return bytes(got)
