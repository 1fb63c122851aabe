"""The errors of the Kafka-protocol codec (docs/protocol.md §16): one family, ``KafkaCodecError``."""

from __future__ import annotations

from .apis import NOT_SERVED, KafkaApi


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
        if api is not None:
            message = f"{api.label} v{api_version} is not served"
        else:
            name, why = NOT_SERVED.get(api_key, (f"api key {api_key}", "not an api of Apache Kafka 4.1"))
            message = f"{name} (api key {api_key}) v{api_version} is not served: {why}"
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.api = api


class CorruptRecords(KafkaCodecError):
    """Records inside a v2 batch that do not decode, or decompress past the bound (§16.6)."""
