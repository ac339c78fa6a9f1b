"""The index file layout: the only module that packs or unpacks its bytes.

::

    header (40 bytes)
      0   8  beginTimestamp   store time of the first indexed message
      8   8  endTimestamp     store time of the last indexed message
      16  8  beginPhyOffset   commitlog offset of the first indexed message
      24  8  endPhyOffset     commitlog offset of the last indexed message
      32  4  hashSlotCount    slots in use
      36  4  indexCount       next entry number; starts at 1 (entry 0 is never used)
    slots: hash_slot_num x int          entry number of the newest entry in the slot, 0 = empty
    entries: index_num x 20 bytes
      0   4  keyHash          abs(java_hash("topic#key"))
      4   8  phyOffset        commitlog offset of the message
      12  4  timeDiff         seconds since beginTimestamp
      16  4  prevIndex        older entry in the same slot, 0 = end of chain

Entry numbers in a slot chain strictly decrease (a new entry always points at an older one),
so a reader that insists on that terminates on any corrupt file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from rocketstore.codec.big_endian import put_int, read_i32
from rocketstore.errors import CorruptDataError
from rocketstore.jit import kernel

__all__ = [
    "ENTRY",
    "ENTRY_DTYPE",
    "ENTRY_SIZE",
    "HASH_SLOT_COUNT_AT",
    "HEADER_SIZE",
    "INDEX_COUNT_AT",
    "SLOT",
    "SLOT_DTYPE",
    "SLOT_SIZE",
    "IndexHeader",
    "decode_entry",
    "decode_header",
    "decode_slot",
    "encode_entry",
    "encode_header",
    "encode_slot",
    "entry_position",
    "file_size",
    "put_keys",
    "slot_position",
]

HEADER_SIZE: Final = 40
SLOT_SIZE: Final = 4
ENTRY_SIZE: Final = 20
_HEADER = struct.Struct(">qqqqii")
ENTRY_DTYPE: Final = np.dtype(
    [("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")]
)
assert ENTRY_DTYPE.itemsize == ENTRY_SIZE
SLOT_DTYPE: Final = np.dtype(">i4")
SLOT: Final = struct.Struct(">i")  # public for the index writer's hot loop (pack_into a mapping)
ENTRY: Final = struct.Struct(">iqii")
assert _HEADER.size == HEADER_SIZE and SLOT.size == SLOT_SIZE and ENTRY.size == ENTRY_SIZE
HASH_SLOT_COUNT_AT: Final = 32  # where the header's counts sit, for a reader naming a bad one
INDEX_COUNT_AT: Final = 36
assert struct.calcsize(">qqqq") == HASH_SLOT_COUNT_AT and INDEX_COUNT_AT + 4 == HEADER_SIZE


@dataclass(slots=True)
class IndexHeader:
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1


def file_size(hash_slots: int, max_entries: int) -> int:
    return HEADER_SIZE + hash_slots * SLOT_SIZE + max_entries * ENTRY_SIZE


def slot_position(slot: int) -> int:
    return HEADER_SIZE + slot * SLOT_SIZE


def entry_position(hash_slots: int, number: int) -> int:
    return HEADER_SIZE + hash_slots * SLOT_SIZE + number * ENTRY_SIZE


def encode_header(h: IndexHeader) -> bytes:
    return _HEADER.pack(
        h.begin_timestamp,
        h.end_timestamp,
        h.begin_phy_offset,
        h.end_phy_offset,
        h.hash_slot_count,
        h.index_count,
    )


def decode_header(buf: bytes | bytearray | memoryview) -> IndexHeader:
    """The header; CorruptDataError when ``buf`` is shorter than one."""
    if len(buf) < HEADER_SIZE:
        raise CorruptDataError(f"an index header needs {HEADER_SIZE} bytes, got {len(buf)}", offset=0)
    return IndexHeader(*_HEADER.unpack_from(buf, 0))


def encode_slot(entry_number: int) -> bytes:
    return SLOT.pack(entry_number)


def decode_slot(buf: bytes | bytearray | memoryview, slot: int) -> int:
    """Slot ``slot``'s entry number; CorruptDataError when the buffer does not hold that slot."""
    at = slot_position(slot)
    if slot < 0 or at + SLOT_SIZE > len(buf):
        raise CorruptDataError(f"index slot {slot} lies outside the {len(buf)}-byte file", offset=at)
    value: int = SLOT.unpack_from(buf, at)[0]
    return value


def encode_entry(key_hash: int, phy_offset: int, time_diff: int, prev_index: int) -> bytes:
    return ENTRY.pack(key_hash, phy_offset, time_diff, prev_index)


def decode_entry(
    buf: bytes | bytearray | memoryview, hash_slots: int, number: int
) -> tuple[int, int, int, int]:
    """(keyHash, phyOffset, timeDiff, prevIndex) of entry ``number``; CorruptDataError when the
    buffer does not hold that entry."""
    at = entry_position(hash_slots, number)
    if number < 0 or hash_slots < 0 or at + ENTRY_SIZE > len(buf):
        raise CorruptDataError(f"index entry {number} lies outside the {len(buf)}-byte file", offset=at)
    kh, phy, diff, prev = ENTRY.unpack_from(buf, at)
    return kh, phy, diff, prev


@kernel(cache=True)
def put_keys(
    buf: npt.NDArray[np.uint8],
    hash_slots: int,
    index_count: int,
    begin_timestamp: int,
    key_hashes: npt.NDArray[np.int64],
    phy_offsets: npt.NDArray[np.int64],
    store_timestamps: npt.NDArray[np.int64],
) -> tuple[int, int]:
    """RocketMQ's IndexFile.putKey for each key in order, on the file's bytes: each entry links
    to its slot's previous entry, then the slot points at it (an entry is complete before a
    concurrent reader can reach it). ``begin_timestamp`` is the header's; an empty file's
    first entry fixes it for the rest. Returns (new indexCount, slots newly used)."""
    entries = HEADER_SIZE + hash_slots * SLOT_SIZE
    new_slots = 0
    first_ever = index_count <= 1
    for j in range(len(key_hashes)):
        h = key_hashes[j]
        slot_at = HEADER_SIZE + (h % hash_slots) * SLOT_SIZE
        prev = read_i32(buf, slot_at)
        if prev <= 0 or prev > index_count:
            prev = 0
            new_slots += 1
        begin = begin_timestamp if j == 0 or not first_ever else store_timestamps[0]
        diff = 0
        if begin > 0:
            diff = min(max((store_timestamps[j] - begin) // 1000, 0), 0x7FFFFFFF)
        at = entries + index_count * ENTRY_SIZE
        put_int(buf, at, h, 4)
        put_int(buf, at + 4, phy_offsets[j], 8)
        put_int(buf, at + 12, diff, 4)
        put_int(buf, at + 16, prev, 4)
        put_int(buf, slot_at, index_count, 4)
        index_count += 1
    return index_count, new_slots
