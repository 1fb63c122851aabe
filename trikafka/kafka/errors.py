"""The errors of the Kafka-protocol codec (docs/protocol.md §16): one family, ``KafkaCodecError``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .apis import KafkaApi


class KafkaCodecError(ValueError):
    """Bytes that do not follow the Kafka protocol, or a value the codec cannot encode."""


class FrameSizeError(KafkaCodecError):
    """A frame's ``size`` prefix is negative or above the bound (§16.2: the connection closes)."""

    def __init__(self, size: int, max_frame_bytes: int):
        super().__init__(f"frame size {size} outside [0, {max_frame_bytes}]")
        self.size = size
        self.max_frame_bytes = max_frame_bytes


class MalformedRequest(KafkaCodecError):
    """A request header or body that does not decode (§16.2: the connection closes)."""


class MalformedResponse(KafkaCodecError):
    """A response header or body that does not decode (client side)."""


class UnsupportedRequest(KafkaCodecError):
    """A request of an api or version outside the table of §16.3, with what answering it needs.

    ``api`` is the table's entry where the api is known (the version is then out
    of range), None where it is not (§16.2: the connection closes).
    """

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                 api: KafkaApi | None):
        what = api.label if api is not None else f"api key {api_key}"
        super().__init__(f"{what} v{api_version} is not served")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.api = api


class CorruptRecords(KafkaCodecError):
    """Records inside a v2 batch that do not decode, or decompress past the bound (§16.6)."""
