"""Big-endian integers in and out of byte arrays, for compiled loops (every store format is
big-endian, as Java's ByteBuffer writes it). Inlined into the kernels that call them."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rocketstore.jit import kernel

__all__ = ["put_int", "read_i32", "read_i64"]


@kernel(cache=True, nogil=True, inline="always")
def read_i32(u8: npt.NDArray[np.uint8], pos: int) -> int:
    v = (np.int64(u8[pos]) << 24) | (np.int64(u8[pos + 1]) << 16) | (np.int64(u8[pos + 2]) << 8) | u8[pos + 3]
    return int(v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v)


@kernel(cache=True, nogil=True, inline="always")
def read_i64(u8: npt.NDArray[np.uint8], pos: int) -> int:
    return int((np.int64(read_i32(u8, pos)) << 32) | (np.int64(read_i32(u8, pos + 4)) & 0xFFFFFFFF))


@kernel(cache=True, nogil=True, inline="always")
def put_int(out: npt.NDArray[np.uint8], pos: int, value: int, width: int) -> None:
    """``value``'s low ``width`` bytes at ``out[pos:]``, most significant first."""
    for k in range(width):
        out[pos + k] = (value >> (8 * (width - 1 - k))) & 0xFF
