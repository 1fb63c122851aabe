"""Frames, request and response headers of §16.2, both sides, against kio's schemas and kafka-python's encoder."""

from __future__ import annotations

import io
import struct
from datetime import timedelta

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsRequestV4
from kio.schema.api_versions.v4.response import ApiVersionsResponse as ApiVersionsResponseV4
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v1.response import MetadataResponse as MetadataResponseV1
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.metadata.v12.request import MetadataRequestTopic as MetadataRequestTopicV12
from kio.schema.metadata.v12.response import MetadataResponse as MetadataResponseV12
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.types import TopicName
from kio.serial import entity_writer
from kio.static.primitive import i16, i32, i32Timedelta

from trikafka.kafka.apis import KafkaApi, api_versions_entries
from trikafka.kafka.errors import (FrameSizeError, KafkaCodecError, MalformedRequest, MalformedResponse,
                                   UnsupportedRequest)
from trikafka.kafka.framing import (FrameReader, decode_response, encode_request, encode_response, parse_request,
                                    request_header, unsupported_version_response)

_SIZE = struct.Struct(">i")


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


def strip(data: bytes) -> bytes:
    """The frame after its size prefix, checking the prefix."""
    assert _SIZE.unpack_from(data, 0)[0] == len(data) - 4
    return data[4:]


class TestFrameReader:
    def test_frames_split_at_any_byte(self):
        stream = frame(b"first") + frame(b"") + frame(b"x" * 300)
        for cut in range(len(stream) + 1):
            reader = FrameReader(1000)
            got = []
            for piece in (stream[:cut], stream[cut:]):
                reader.feed(piece)
                while (f := reader.next_frame()) is not None:
                    got.append(bytes(f))
            assert got == [b"first", b"", b"x" * 300], cut
            assert reader.buffered_bytes == 0

    def test_byte_by_byte_then_drained(self):
        frames = [bytes([n]) * n for n in range(12)]
        reader = FrameReader(20)
        for byte in b"".join(frame(f) for f in frames):
            reader.feed(bytes([byte]))
        got = []
        while (f := reader.next_frame()) is not None:
            got.append(bytes(f))
        assert got == frames

    def test_a_bad_prefix_behind_pipelined_frames_fails_when_it_arrives(self):
        reader = FrameReader(20)
        for byte in frame(b"a") + frame(b"bb"):
            reader.feed(bytes([byte]))
        for byte in _SIZE.pack(21)[:3]:
            reader.feed(bytes([byte]))
        with pytest.raises(FrameSizeError):
            reader.feed(_SIZE.pack(21)[3:])

    def test_a_frame_stays_valid_after_later_feeds(self):
        reader = FrameReader(100)
        reader.feed(frame(b"one") + frame(b"two"))
        first = reader.next_frame()
        reader.feed(frame(b"three"))
        assert [bytes(first), bytes(reader.next_frame()), bytes(reader.next_frame())] == [b"one", b"two", b"three"]
        assert reader.next_frame() is None

    def test_a_frame_is_read_only(self):
        """As documented: the decoders take a read-only buffer as it is, and copy a writable one whole
        first (a 1 MB Produce, once more per request)."""
        reader = FrameReader(100)
        reader.feed(frame(b"one") + frame(b"two")[:5])
        first = reader.next_frame()
        assert first is not None and first.readonly and bytes(first) == b"one"

    def test_the_bound_is_inclusive(self):
        reader = FrameReader(4)
        reader.feed(frame(b"abcd"))
        assert bytes(reader.next_frame()) == b"abcd"

    @pytest.mark.parametrize("size", [5, -1, -(2 ** 31)])
    def test_a_size_out_of_bounds_fails_as_soon_as_its_prefix_arrives(self, size):
        reader = FrameReader(4)
        reader.feed(frame(b"ok"))
        with pytest.raises(FrameSizeError) as caught:
            reader.feed(_SIZE.pack(size))  # no byte of the frame itself has come
        assert caught.value.size == size and isinstance(caught.value, KafkaCodecError)
        with pytest.raises(FrameSizeError):
            reader.next_frame()  # the reader stays failed
        with pytest.raises(FrameSizeError):
            reader.feed(b"more")
        assert reader.buffered_bytes <= 6  # the frame before the bad prefix, at most


def metadata_v12_request() -> MetadataRequestV12:
    return MetadataRequestV12(topics=(MetadataRequestTopicV12(topic_id=None, name=TopicName("events")),),
                              allow_auto_topic_creation=True, include_topic_authorized_operations=False)


class TestRequests:
    @pytest.mark.parametrize("client_id", ["kcat", None, "ü" * 3])
    def test_flexible_request_round_trip(self, client_id):
        body = metadata_v12_request()
        data = encode_request(3, 12, 77, client_id, body)
        request = parse_request(strip(data))
        assert (request.api, request.api_key, request.api_version) == (KafkaApi.METADATA, 3, 12)
        assert (request.correlation_id, request.client_id, request.body) == (77, client_id, body)

    def test_non_flexible_request_round_trip(self):
        body = MetadataRequestV1(topics=None)
        request = parse_request(strip(encode_request(3, 1, 5, "c", body)))
        assert (request.api_version, request.body) == (1, body)

    def test_header_v1_and_v2_differ_by_the_tagged_fields(self):
        flexible = strip(encode_request(18, 3, 1, "c", ApiVersionsRequestV3(client_software_name="a",
                                                                            client_software_version="1")))
        assert flexible[:11] == struct.pack(">hhih", 18, 3, 1, 1) + b"c"
        assert flexible[11] == 0  # no tagged fields in the header
        plain = strip(encode_request(3, 1, 1, "c", MetadataRequestV1(topics=None)))
        assert plain[:11] == struct.pack(">hhih", 3, 1, 1, 1) + b"c" and len(plain) == 15

    @pytest.mark.parametrize("version", [1, 8, 9, 12])
    def test_kafka_pythons_requests_parse(self, version):
        from kafka.protocol.metadata import MetadataRequest

        cls = MetadataRequest[version]
        request = cls(topics=[cls.MetadataRequestTopic(name="t", topic_id=None)], allow_auto_topic_creation=False)
        request.with_header(correlation_id=9, client_id="kp")
        parsed = parse_request(strip(request.encode(header=True, framed=True)))
        assert (parsed.api_version, parsed.correlation_id, parsed.client_id) == (version, 9, "kp")
        assert [topic.name for topic in parsed.body.topics] == ["t"]

    @pytest.mark.parametrize("api_key, version, known", [(0, 2, True), (1, 13, True), (3, 13, True),
                                                         (8, 1, True), (4, 0, False), (9999, 0, False)])
    def test_an_api_or_version_outside_the_table(self, api_key, version, known):
        data = struct.pack(">hhih", api_key, version, 42, 3) + b"cli" + b"\x00\x01garbage"
        with pytest.raises(UnsupportedRequest) as caught:
            parse_request(data)
        error = caught.value
        assert (error.api_key, error.api_version, error.correlation_id, error.client_id) == (
            api_key, version, 42, "cli")
        assert (error.api is not None) == known

    @pytest.mark.parametrize("data", [
        b"", b"\x00\x03\x00\x0c\x00\x00",  # shorter than the fixed header
        struct.pack(">hhih", 3, 12, 1, 10) + b"abc",  # client id runs past the frame
        struct.pack(">hhih", 3, 1, 1, -1) + b"\x00\x00\x00\x05",  # topics array runs past the frame
    ])
    def test_a_request_that_does_not_decode(self, data):
        with pytest.raises(MalformedRequest):
            parse_request(data)

    def test_bytes_after_the_body_are_ignored_as_kafka_does(self):
        data = strip(encode_request(3, 12, 1, "c", metadata_v12_request()))
        # librdkafka 2.x's Metadata v12 for all topics, byte for byte: three bytes follow the body.
        assert parse_request(data + b"\x01\x00\x00").body == parse_request(data).body

    def test_encode_request_refuses_an_unserved_version(self):
        with pytest.raises(KafkaCodecError):
            encode_request(3, 13, 1, "c", metadata_v12_request())


def metadata_v12_response() -> MetadataResponseV12:
    return MetadataResponseV12(throttle_time=i32Timedelta.parse(timedelta(0)), brokers=(), cluster_id="cid",
                               controller_id=i32(1), topics=())


class TestResponses:
    def request(self, api_key: int, version: int, body):
        return parse_request(strip(encode_request(api_key, version, 1234, "c", body)))

    def test_flexible_response_has_header_v1(self):
        request = self.request(3, 12, metadata_v12_request())
        data = strip(encode_response(request, metadata_v12_response()))
        assert data[:5] == struct.pack(">i", 1234) + b"\x00"
        assert decode_response(3, 12, data) == (1234, metadata_v12_response())

    def test_non_flexible_response_has_header_v0(self):
        request = self.request(3, 1, MetadataRequestV1(topics=None))
        body = MetadataResponseV1(brokers=(), controller_id=i32(1), topics=())
        data = strip(encode_response(request, body))
        assert data[:4] == struct.pack(">i", 1234) and decode_response(3, 1, data) == (1234, body)

    def test_api_versions_v3_answers_with_header_v0(self):
        request = self.request(18, 3, ApiVersionsRequestV3(client_software_name="a", client_software_version="1"))
        body = ApiVersionsResponseV3(error_code=ErrorCode.none, api_keys=api_versions_entries(3),
                                     throttle_time=i32Timedelta.parse(timedelta(0)))
        data = strip(encode_response(request, body))
        # error code 0 and the compact array's length right after the correlation id: no tagged fields
        assert data[4:7] == b"\x00\x00" + bytes([len(KafkaApi) + 1])
        assert decode_response(18, 3, data) == (1234, body)

    def test_api_versions_v4_is_served_as_v3_is(self):
        """Kafka 3.9's v4, which Kafka 4's Java client asks first (§16.3): answered at v4, header v0."""
        parsed = parse_request(strip(encode_request(18, 4, 1234, "c", ApiVersionsRequestV4(
            client_software_name="a", client_software_version="1"))))
        assert (parsed.api_version, parsed.body.client_software_name) == (4, "a")
        body = ApiVersionsResponseV4(error_code=ErrorCode.none, api_keys=api_versions_entries(4),
                                     throttle_time=i32Timedelta.parse(timedelta(0)))
        data = strip(encode_response(parsed, body))
        assert data[4:7] == b"\x00\x00" + bytes([len(KafkaApi) + 1])
        assert decode_response(18, 4, data) == (1234, body)

    def test_a_body_of_another_version_is_refused(self):
        request = self.request(3, 12, metadata_v12_request())
        with pytest.raises(TypeError):
            encode_response(request, MetadataResponseV1(brokers=(), controller_id=i32(1), topics=()))

    def test_a_truncated_response_is_malformed(self):
        request = self.request(3, 12, metadata_v12_request())
        data = strip(encode_response(request, metadata_v12_response()))
        with pytest.raises(MalformedResponse):
            decode_response(3, 12, data[:-2])
        # Bytes after a whole body are ignored, as in a request (§16.2): librdkafka's mock cluster sends one.
        assert decode_response(3, 12, data + b"\x00") == decode_response(3, 12, data)

    def test_unsupported_api_versions_gets_the_table_in_a_v0_body(self):
        data = struct.pack(">hhih", 18, 5, 99, 1) + b"c" + b"\x00\x01\x02"
        with pytest.raises(UnsupportedRequest) as caught:
            parse_request(data)
        answer = strip(unsupported_version_response(caught.value))
        correlation_id, body = decode_response(18, 0, answer)
        assert correlation_id == 99 and isinstance(body, ApiVersionsResponseV0)
        assert body.error_code == ErrorCode.unsupported_version == 35
        assert [(e.api_key, e.min_version, e.max_version) for e in body.api_keys] == [
            (int(api), api.min_version, api.max_version) for api in KafkaApi]

    def test_kafka_python_reads_the_unsupported_answer(self):
        from kafka.protocol.metadata import ApiVersionsResponse

        with pytest.raises(UnsupportedRequest) as caught:
            parse_request(struct.pack(">hhih", 18, 7, 5, -1))
        answer = strip(unsupported_version_response(caught.value))
        response = ApiVersionsResponse[0].decode(answer, header=True)
        assert response.error_code == 35 and len(response.api_keys) == len(KafkaApi)

    @pytest.mark.parametrize("api_key, version", [(0, 2), (3, 13), (8, 1)])
    def test_other_unsupported_requests_close(self, api_key, version):
        with pytest.raises(UnsupportedRequest) as caught:
            parse_request(struct.pack(">hhih", api_key, version, 5, -1))
        assert unsupported_version_response(caught.value) is None


@pytest.mark.parametrize("flexible", [False, True])
@pytest.mark.parametrize("client_id", [None, "", "producer-1", "klïent"])
def test_the_request_header_is_the_bytes_kio_writes(flexible, client_id):
    header_class = RequestHeaderV2 if flexible else RequestHeaderV1
    header = header_class(request_api_key=i16(3), request_api_version=i16(12 if flexible else 1),
                          correlation_id=i32(2 ** 31 - 1), client_id=client_id)
    out = io.BytesIO()
    entity_writer(header_class)(out, header)
    assert request_header(3, 12 if flexible else 1, 2 ** 31 - 1, client_id, flexible=flexible) == out.getvalue()


def test_a_request_header_that_does_not_encode_is_a_codec_error():
    with pytest.raises(KafkaCodecError, match="request header"):
        request_header(3, 1, 2 ** 31, "c", flexible=False)
