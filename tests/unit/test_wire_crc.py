"""CRC-32 (spec §1): java.util.zip.CRC32, checked against crcmod as an independent oracle."""

import crcmod.predefined
import pytest

from trikafka.wire import crc32

CRCMOD_CRC32 = crcmod.predefined.mkCrcFun("crc-32")


@pytest.mark.parametrize("data, expected", [
    (b"", 0x00000000),
    (b"hello", 0x3610A686),          # spec §15
    (b"a", 0xE8B7BE43),              # spec §15 gzip example
    (b"b", 0x71BEEFF9),
    (b"123456789", 0xCBF43926),      # the standard CRC-32 check value
])
def test_known_values(data, expected):
    assert crc32(data) == expected == CRCMOD_CRC32(data)


def test_unsigned_and_accepts_buffers():
    data = bytes(range(256)) * 3
    value = crc32(data)
    assert 0 <= value <= 0xFFFFFFFF and value == CRCMOD_CRC32(data)
    assert crc32(bytearray(data)) == crc32(memoryview(data)) == value
    assert crc32(memoryview(data)[10:20]) == CRCMOD_CRC32(data[10:20])
    # a value with the top bit set stays positive (Java's signed view is the same bits)
    assert crc32(b"\xff" * 4) == 0xFFFFFFFF
