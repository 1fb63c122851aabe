"""Single messages (spec §3.2): magic 0 and 1, empty and large payloads."""

import struct

import pytest

from trikafka.wire import (
    ENTRY_OVERHEAD_BYTES,
    HEADER_BYTES,
    Codec,
    InvalidMessageError,
    LocalProtocolError,
    Message,
    crc32,
    decode_message,
    encode_entry,
)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("payload", [b"", b"x", b"hello", bytes(range(256)) * 400])  # up to ~100 KB
def test_encode_decode_round_trip(magic, payload):
    entry = encode_entry(payload, magic=magic)
    assert len(entry) == ENTRY_OVERHEAD_BYTES[magic] + len(payload)
    (n,) = struct.unpack_from(">i", entry)
    assert n == HEADER_BYTES[magic] + len(payload) == len(entry) - 4
    msg = decode_message(entry[4:])
    assert msg.magic == magic and msg.payload == payload and msg.is_valid
    assert msg.crc == crc32(payload)
    assert msg.codec == Codec.NONE
    assert msg.encode_entry() == entry


def test_large_payload_100kb():
    payload = bytes((i * 7) & 0xFF for i in range(100 * 1024))
    msg = decode_message(encode_entry(payload)[4:])
    assert msg.payload == payload and msg.is_valid


def test_crc_covers_payload_only():
    entry = bytearray(encode_entry(b"payload", magic=1))
    entry[5] |= 0b1111_0000  # attribute bits 2-7 are ignored and not covered by the CRC
    msg = decode_message(bytes(entry[4:]))
    assert msg.is_valid and msg.codec == Codec.NONE and msg.attributes == 0xF0
    # a decoded message re-encodes byte for byte, even with high attribute bits set
    assert msg.encode_entry() == bytes(entry)
    entry[-1] ^= 1
    assert not decode_message(bytes(entry[4:])).is_valid


def test_codec_from_attributes():
    for codec in (0, 1, 2, 3):
        msg = decode_message(bytes([1, 0x04 | codec]) + struct.pack(">I", crc32(b"")))
        assert msg.codec == codec
    # magic 0 has no attributes byte: never compressed
    assert decode_message(bytes([0]) + struct.pack(">I", crc32(b"ab")) + b"ab").codec == Codec.NONE


@pytest.mark.parametrize("raw, match", [
    (b"", "shorter than its magic"),
    (b"\x02\x00\x00\x00\x00\x00", "unknown magic byte 2"),
    (b"\xff", "unknown magic byte 255"),
    (b"\x00\x00\x00\x00", "shorter than its 5-byte header"),
    (b"\x01\x00\x00\x00\x00", "shorter than its 6-byte header"),
])
def test_decode_rejects_bad_framing(raw, match):
    with pytest.raises(InvalidMessageError, match=match):
        decode_message(raw)


def test_encode_rejects_what_0_7_cannot_express():
    with pytest.raises(LocalProtocolError):
        encode_entry(b"x", magic=0, codec=Codec.GZIP)
    with pytest.raises(LocalProtocolError):
        encode_entry(b"x", magic=2)
    with pytest.raises(LocalProtocolError):
        encode_entry(b"x", magic=1, codec=3)


def test_message_keeps_stored_crc():
    msg = Message(1, 0, 0xDEADBEEF, b"abc")
    assert not msg.is_valid
    assert msg.encode_entry()[6:10] == b"\xde\xad\xbe\xef"
