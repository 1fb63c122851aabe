"""The one CRC-32 of the project (IEEE 802.3, what 0.7's ``java.util.zip.CRC32`` computes).

``crc32`` is ISA-L's implementation (the ``isal`` package), which folds with
carry-less multiplication: ``bench/crc_bench.py`` measures it against
``zlib.crc32`` and crcmod on 200-byte and 1 MB inputs (about 2x zlib's speed
on a 200-byte message, 10x or more on a 1 MB set).  crcmod stays as an
independent oracle in ``tests/unit/test_wire_crc.py``.  Every message CRC in
trikafka, written or checked, goes through this module.
"""

from __future__ import annotations

from isal.isal_zlib import crc32

# ``crc32(data, value=0) -> int``: the unsigned CRC-32 of ``data`` (any buffer), as 0.7
# writes it into a message header; ``value`` continues a CRC, so
# ``crc32(b, crc32(a)) == crc32(a + b)``.  The library's function itself, not a wrapper:
# the produce and fetch paths call it once per message.
__all__ = ["crc32", "crc32_zero_extend"]


# CRC-32 of data followed by n zero bytes, in O(log n): the zlib crc32_combine method
# (the effect of a zero byte on the CRC register is a linear map over GF(2)).
def _gf2_times(matrix: list[int], vector: int) -> int:
    total, i = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_times(matrix, row) for row in matrix]


def _zero_operators() -> list[list[int]]:
    odd = [0xEDB88320] + [1 << i for i in range(31)]  # one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    operators = []
    for _ in range(64):  # operators[k] applies 2**k zero bytes
        even = _gf2_square(odd)
        operators.append(even)
        odd = even
    return operators


_ZERO_BYTE_OPERATORS = None


def crc32_zero_extend(crc: int, zeros: int) -> int:
    """``crc32(data + bytes(zeros))`` given ``crc = crc32(data)``."""
    global _ZERO_BYTE_OPERATORS
    if zeros <= 4096:
        return crc32(bytes(zeros), crc)
    if _ZERO_BYTE_OPERATORS is None:
        _ZERO_BYTE_OPERATORS = _zero_operators()
    register, k = crc ^ 0xFFFFFFFF, 0  # the raw CRC register, before final inversion
    while zeros:
        if zeros & 1:
            register = _gf2_times(_ZERO_BYTE_OPERATORS[k], register)
        zeros >>= 1
        k += 1
    return register ^ 0xFFFFFFFF
