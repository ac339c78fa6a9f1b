"""CRC-32 (zlib's polynomial) for compiled loops over many records.

``zlib.crc32`` is the reference and is used wherever one body at a time is checked; a Python call
per record costs more than the CRC of a 100-byte body, so loops over millions of records (the
recovery scan, batch encoding) use this slicing-by-8 kernel, tested against zlib.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from rocketstore.jit import kernel

__all__ = ["CRC_TABLES", "crc32"]


def _crc_tables() -> npt.NDArray[np.uint32]:
    """Slicing-by-8 tables for the zlib CRC-32 (polynomial 0xEDB88320); row 0 is the classic one."""
    table = np.zeros((8, 256), dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table[0, i] = c
    for k in range(1, 8):
        table[k] = (table[k - 1] >> 8) ^ table[0, table[k - 1] & 0xFF]
    return table


CRC_TABLES: Final = _crc_tables()


@kernel(cache=True, nogil=True)
def crc32(u8: npt.NDArray[np.uint8], start: int, length: int, tables: npt.NDArray[np.uint32]) -> int:
    """zlib.crc32 of ``u8[start:start+length]``, eight bytes a step."""
    c = np.uint32(0xFFFFFFFF)
    p = start
    end = start + length
    while p + 8 <= end:
        c ^= (
            np.uint32(u8[p])
            | (np.uint32(u8[p + 1]) << 8)
            | (np.uint32(u8[p + 2]) << 16)
            | (np.uint32(u8[p + 3]) << 24)
        )
        c = (
            tables[7, c & 0xFF]
            ^ tables[6, (c >> 8) & 0xFF]
            ^ tables[5, (c >> 16) & 0xFF]
            ^ tables[4, c >> 24]
            ^ tables[3, u8[p + 4]]
            ^ tables[2, u8[p + 5]]
            ^ tables[1, u8[p + 6]]
            ^ tables[0, u8[p + 7]]
        )
        p += 8
    while p < end:
        c = tables[0, (c ^ u8[p]) & 0xFF] ^ (c >> 8)
        p += 1
    return int(c ^ np.uint32(0xFFFFFFFF))
