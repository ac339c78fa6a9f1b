"""The consume-queue entry: the only module that packs or unpacks its 20 bytes.

::

    pos  size  field
    0    8     commitlog offset of the record (long)
    8    4     record size (int)
    16   8     tagsCode (long): java_hash(tags), or the delivery time in SCHEDULE_TOPIC_XXXX

Queue offset N lives at byte N*20 of the queue's logical space. An entry with offset >= 0 and
size > 0 is valid; zero-filled space marks the end of the queue. ``fillPreBlank`` entries
(offset 0, size Integer.MAX_VALUE, tagsCode 0) pad a queue whose first segment starts past 0.
"""

from __future__ import annotations

import struct
from typing import Final

import numpy as np
import numpy.typing as npt

from rocketstore.codec.big_endian import read_i32, read_i64
from rocketstore.errors import CorruptDataError
from rocketstore.jit import kernel

__all__ = [
    "CQ_ENTRY_SIZE",
    "ENTRY_DTYPE",
    "PRE_BLANK_ENTRY",
    "PRE_BLANK_SIZE",
    "decode_entries",
    "decode_entry",
    "encode_entries",
    "encode_entry",
    "entry_offset",
    "entry_size",
    "valid_prefix_length",
]

CQ_ENTRY_SIZE: Final = 20
_ENTRY = struct.Struct(">qiq")
assert _ENTRY.size == CQ_ENTRY_SIZE
ENTRY_DTYPE: Final = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
assert ENTRY_DTYPE.itemsize == CQ_ENTRY_SIZE
PRE_BLANK_SIZE: Final = 0x7FFFFFFF  # Integer.MAX_VALUE: no record is that long
PRE_BLANK_ENTRY: Final = _ENTRY.pack(0, PRE_BLANK_SIZE, 0)


@kernel(cache=True, nogil=True, inline="always")
def entry_offset(u8: npt.NDArray[np.uint8], i: int) -> int:
    """The commitlog offset of entry ``i`` of the entries in ``u8`` (compiled code's reader)."""
    return read_i64(u8, i * CQ_ENTRY_SIZE)


@kernel(cache=True, nogil=True, inline="always")
def entry_size(u8: npt.NDArray[np.uint8], i: int) -> int:
    """The record size of entry ``i`` of the entries in ``u8``."""
    return read_i32(u8, i * CQ_ENTRY_SIZE + 8)


def encode_entry(offset: int, size: int, tags_code: int) -> bytes:
    return _ENTRY.pack(offset, size, tags_code)


def decode_entry(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int, int]:
    """(commitlog offset, size, tagsCode) of the entry at ``buf[pos:]``; CorruptDataError when
    the buffer has no 20 bytes there."""
    if pos < 0 or pos + CQ_ENTRY_SIZE > len(buf):
        raise CorruptDataError(
            f"a consume-queue entry needs 20 bytes at position {pos}, buffer has {len(buf)}", offset=pos
        )
    offset, size, tags = _ENTRY.unpack_from(buf, pos)
    return offset, size, tags


def encode_entries(offsets: npt.ArrayLike, sizes: npt.ArrayLike, tags_codes: npt.ArrayLike) -> bytes:
    """Many entries at once, as one contiguous block."""
    offs = np.asarray(offsets, dtype=np.int64)
    arr = np.empty(len(offs), dtype=ENTRY_DTYPE)
    arr["offset"] = offs
    arr["size"] = np.asarray(sizes, dtype=np.int32)
    arr["tags_code"] = np.asarray(tags_codes, dtype=np.int64)
    return arr.tobytes()


def decode_entries(buf: bytes | bytearray | memoryview) -> npt.NDArray[np.void]:
    """A structured array (fields offset, size, tags_code) over whole entries of ``buf`` (no copy)."""
    whole = len(buf) - len(buf) % CQ_ENTRY_SIZE
    return np.frombuffer(buf, dtype=ENTRY_DTYPE, count=whole // CQ_ENTRY_SIZE)


def valid_prefix_length(entries: npt.NDArray[np.void]) -> int:
    """How many leading entries are valid (offset >= 0 and size > 0), as recovery counts them."""
    bad = np.flatnonzero((entries["offset"] < 0) | (entries["size"] <= 0))
    return int(bad[0]) if len(bad) else len(entries)
