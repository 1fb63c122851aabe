"""The one CRC-32 used on the hot path.

0.7 uses ``java.util.zip.CRC32`` (IEEE 802.3), which is the same function as
``zlib.crc32``.  ``bench/crc_bench.py`` measures ``zlib.crc32`` against crcmod's
CRC-32 on 200-byte and 1 MB inputs; zlib wins by a wide margin on both (figures
in that script's output), so zlib is the hot path.  crcmod stays as an
independent oracle in ``tests/unit/test_wire_crc.py``.
"""

from __future__ import annotations

import zlib


def crc32(data: bytes | bytearray | memoryview) -> int:
    """Unsigned CRC-32 of ``data``, as 0.7 writes it into a message header."""
    return zlib.crc32(data) & 0xFFFFFFFF
