"""Fast scans over commitlog segments: where the valid records end, and where records start.

``commitlog_record`` owns the record layout and decodes one record at a time; this module walks
millions of them. The walks are compiled with numba (one machine-code loop per segment, no
Python work per record) and release the GIL. They apply exactly the validity rules of
``decode_record``; whenever a walk stops at an invalid record, that record is decoded again by
``decode_record`` so the error names what is wrong, in the decoder's words.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import islice
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from rocketstore.codec.big_endian import read_i32, read_i64
from rocketstore.codec.byte_copy import copy_bytes
from rocketstore.codec.commitlog_record import (
    BLANK_MAGIC,
    MESSAGE_MAGIC_V1,
    MESSAGE_MAGIC_V2,
    MIN_RECORD_SIZE,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    ScanStop,
    SegmentScan,
    decode_record,
)
from rocketstore.codec.consume_queue_entry import CQ_ENTRY_SIZE, entry_offset, entry_size
from rocketstore.codec.crc import crc32, crc32_function
from rocketstore.errors import CorruptDataError
from rocketstore.jit import interpreted, kernel, small

__all__ = [
    "RECORD_FIELDS",
    "Extent",
    "TransferStop",
    "check_transfer",
    "copy_spans",
    "find_record_start",
    "first_torn_record",
    "gather_records",
    "message_starts",
    "next_record_start",
    "plain_run",
    "range_starts",
    "read_record_fields",
    "record_fields",
    "record_header",
    "record_is_well_formed",
    "record_layout",
    "scan_extent",
    "store_timestamps",
    "well_formed",
]

Buffer = bytes | bytearray | memoryview

_BODY_LEN_POS_BASE: Final = 68  # BODYLENGTH is at 68 + born host length + store host length
_MAGIC = struct.Struct(">i")
_QUEUEID_AT: Final = 12
_QUEUEOFFSET_AT: Final = 20
_PHYSICALOFFSET_AT: Final = 28
_SYSFLAG_AT: Final = 36
_BORNHOST_AT: Final = 48
_RESYNC_TAIL: Final = 36  # MAGICCODE and PHYSICALOFFSET (at +28) must fit to recognise a record start
_STOP_END_OF_DATA: Final = 0
_STOP_BLANK: Final = 1
_STOP_CORRUPT: Final = 2
_STOPS: Final[tuple[ScanStop, ...]] = ("end_of_data", "blank", "corrupt")
_WALK_STEP: Final = 256  # records scan_extent walks in Python between looks at the budget
_LIVE_RESCANS: Final = 8  # scan_extent's walks on past a record a writer finished meanwhile
# check_transfer's stops beyond _STOPS
_STOP_INCOMPLETE: Final = 3
_STOP_BAD_BLANK: Final = 4
_STOP_PAST_SEGMENT: Final = 5
_STOP_MISPLACED: Final = 6
_STOP_NEGATIVE_QUEUE: Final = 7


@kernel(cache=True, nogil=True, inline="always")
def _i16(u8: npt.NDArray[np.uint8], pos: int) -> int:
    v = (np.int64(u8[pos]) << 8) | u8[pos + 1]
    return int(v - 65536 if v >= 32768 else v)


@kernel(cache=True, nogil=True, inline="always")
def _field_positions(u8: npt.NDArray[np.uint8], pos: int) -> tuple[int, int]:
    """Where STORETIMESTAMP and BODYLENGTH sit in the record at ``pos``: both move with the
    host lengths (8 for IPv4, 20 for IPv6) that SYSFLAG announces."""
    sys_flag = read_i32(u8, pos + _SYSFLAG_AT)
    born = 20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8
    store = 20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8
    return pos + _BORNHOST_AT + born, pos + _BODY_LEN_POS_BASE + born + store


@kernel(cache=True, nogil=True)
def _message_is_valid(
    u8: npt.NDArray[np.uint8], pos: int, total: int, v2: bool, check_crc: bool, crc_fn: npt.NDArray[np.int64]
) -> bool:
    """The checks of ``decode_record`` on a MESSAGE record that lies inside the buffer: the parts
    add up to TOTALSIZE (and the body's CRC matches)."""
    end = pos + total
    if total < 40:
        return False
    body_len_at = _field_positions(u8, pos)[1]
    if body_len_at + 4 > end:
        return False
    body_len = read_i32(u8, body_len_at)
    body_start = body_len_at + 4
    topic_len_size = 2 if v2 else 1
    if body_len < 0 or body_start + body_len + topic_len_size > end:
        return False
    topic_len_at = body_start + body_len
    topic_len = np.int64(u8[topic_len_at])
    if v2:
        topic_len = (topic_len << 8) | u8[topic_len_at + 1]
    props_len_at = topic_len_at + topic_len_size + topic_len
    if props_len_at + 2 > end:
        return False
    props_len = _i16(u8, props_len_at)
    if props_len < 0 or props_len_at + 2 + props_len != end:
        return False
    if check_crc:
        return crc32(u8, body_start, body_len, crc_fn) & 0x7FFFFFFF == read_i32(u8, pos + 8)
    return True


@kernel(cache=True, nogil=True)
def _scan(
    u8: npt.NDArray[np.uint8], start: int, limit: int, check_crc: bool, crc_fn: npt.NDArray[np.int64]
) -> tuple[int, int, int, int]:
    """(records, position, stop code, blank size): ``SegmentScan``'s walk without decoding."""
    pos = start
    records = 0
    while True:
        if pos + 8 > limit:
            return records, pos, _STOP_END_OF_DATA, 0
        total = read_i32(u8, pos)
        magic = read_i32(u8, pos + 4)
        if magic == BLANK_MAGIC:
            return records, pos, _STOP_BLANK, total
        if total == 0 and magic == 0:
            return records, pos, _STOP_END_OF_DATA, 0
        if magic != MESSAGE_MAGIC_V1 and magic != MESSAGE_MAGIC_V2:
            return records, pos, _STOP_CORRUPT, 0
        if total <= 0 or pos + total > limit:
            return records, pos, _STOP_CORRUPT, 0
        if not _message_is_valid(u8, pos, total, magic == MESSAGE_MAGIC_V2, check_crc, crc_fn):
            return records, pos, _STOP_CORRUPT, 0
        records += 1
        pos += total


# Releases the GIL: the slave calls it once per read (every frame the read completed, joined),
# not per 32 KiB frame, so the wait to get the GIL back is paid a few hundred times per 237 MB,
# and the replica's dispatcher runs beside it.
@kernel(cache=True, nogil=True)
def _check_transfer(
    u8: npt.NDArray[np.uint8], start: int, base: int, segment_size: int, crc_fn: npt.NDArray[np.int64]
) -> tuple[int, int, int]:
    """(position, stop code, bytes wanted): ``check_transfer``'s walk. ``base`` is the log offset
    of ``u8[0]``; the bytes from ``start`` lie in one segment."""
    limit = len(u8)
    segment_end = start + segment_size - (base + start) % segment_size
    pos = start
    while pos < limit:
        if pos + 8 > limit:
            return pos, _STOP_INCOMPLETE, 8
        total = read_i32(u8, pos)
        magic = read_i32(u8, pos + 4)
        if magic == BLANK_MAGIC:
            if total != segment_end - pos:
                return pos, _STOP_BAD_BLANK, 0
            return pos + 8, _STOP_BLANK, 0
        if magic != MESSAGE_MAGIC_V1 and magic != MESSAGE_MAGIC_V2:
            return pos, _STOP_CORRUPT, 0
        if total < MIN_RECORD_SIZE:
            return pos, _STOP_CORRUPT, 0
        if total > segment_end - pos:
            return pos, _STOP_PAST_SEGMENT, 0
        if pos + total > limit:
            return pos, _STOP_INCOMPLETE, total
        if not _message_is_valid(u8, pos, total, magic == MESSAGE_MAGIC_V2, True, crc_fn):
            return pos, _STOP_CORRUPT, 0
        if read_i64(u8, pos + _PHYSICALOFFSET_AT) != base + pos:
            return pos, _STOP_MISPLACED, 0
        if read_i32(u8, pos + _QUEUEID_AT) < 0 or read_i64(u8, pos + _QUEUEOFFSET_AT) < 0:
            return pos, _STOP_NEGATIVE_QUEUE, 0
        pos += total
    return pos, _STOP_END_OF_DATA, 0


TransferStop = Literal["end_of_data", "incomplete", "blank"]


def check_transfer(buf: Buffer, base: int, start: int, segment_size: int) -> tuple[int, TransferStop, int]:
    """Check the records of ``buf[start:]``, bytes of a commitlog from log offset ``base + start``
    that lie in one segment of ``segment_size`` bytes (what a master ships to a replica), and say
    how far they are whole and valid: (position, stop, wanted).

    Every record must have a message's MAGICCODE, a TOTALSIZE equal to the sum of its parts and
    inside its segment, the CRC of its body, a PHYSICALOFFSET naming its own log offset, and a
    QUEUEID and QUEUEOFFSET that are not negative; a BLANK must reach exactly the segment's end.
    Stops: "end_of_data" (position = len(buf)); "incomplete", a record whose first ``wanted``
    bytes are not all in yet (8 for its TOTALSIZE and MAGICCODE) starts at position; "blank", a
    valid BLANK's 8 bytes end at position (the rest of the segment is filler). Raises
    CorruptDataError (``offset``: the record's log offset) naming what is wrong otherwise."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        pos, stop, wanted = _check_transfer(u8, start, base, segment_size, crc32_function())
    finally:
        del u8
    if stop == _STOP_END_OF_DATA:
        return pos, "end_of_data", 0
    if stop == _STOP_INCOMPLETE:
        return pos, "incomplete", wanted
    if stop == _STOP_BLANK:
        return pos, "blank", 0
    at = base + pos
    (total,) = struct.unpack_from(">i", buf, pos)
    left = segment_size - at % segment_size
    if stop == _STOP_BAD_BLANK:
        reason = f"BLANK record of TOTALSIZE {total} does not end its segment ({left} bytes left)"
    elif stop == _STOP_PAST_SEGMENT:
        reason = f"TOTALSIZE {total} runs past the end of its segment ({left} bytes left)"
    elif stop == _STOP_MISPLACED:
        (physical,) = struct.unpack_from(">q", buf, pos + _PHYSICALOFFSET_AT)
        reason = f"PHYSICALOFFSET {physical} is not the record's position"
    elif stop == _STOP_NEGATIVE_QUEUE:
        queue_id, _, queue_offset = struct.unpack_from(">iiq", buf, pos + _QUEUEID_AT)
        reason = f"negative QUEUEID {queue_id} or QUEUEOFFSET {queue_offset}"
    else:
        try:
            decode_record(buf, pos, check_crc=True)
        except CorruptDataError as exc:
            reason = exc.reason
        else:
            raise AssertionError(f"check_transfer and decode_record disagree about the record at {at}")
    raise CorruptDataError(reason, offset=at)


@kernel(cache=True, nogil=True)
def _message_starts(u8: npt.NDArray[np.uint8], start: int, limit: int) -> tuple[npt.NDArray[np.int64], int]:
    """Positions of the consecutive MESSAGE records from ``start`` (sizes and magics only)."""
    starts = np.empty(max(0, (limit - start) // 40 + 1), dtype=np.int64)
    n = 0
    pos = start
    while pos + 8 <= limit:
        total = read_i32(u8, pos)
        magic = read_i32(u8, pos + 4)
        if (magic != MESSAGE_MAGIC_V1 and magic != MESSAGE_MAGIC_V2) or total <= 0 or pos + total > limit:
            break
        starts[n] = pos
        n += 1
        pos += total
    return starts[:n].copy(), pos


@dataclass(frozen=True, slots=True)
class Extent:
    """Where the valid records of a segment end (see ``scan_extent``)."""

    position: int  # just past the last valid record
    records: int
    stop: ScanStop
    blank_size: int
    error: CorruptDataError | None


def scan_extent(buf: Buffer, start: int = 0, end: int | None = None, *, check_crc: bool = False) -> Extent:
    """How far the valid records of one segment reach: the same stop, position and validity
    rules as iterating a ``SegmentScan``, without decoding the records."""
    limit = len(buf) if end is None else min(end, len(buf))
    # The first records through SegmentScan itself, while the interpreted budget lasts: a small
    # store opens without loading the compiler; the compiled walk goes on from where it stopped.
    walk = SegmentScan(buf, start, limit, check_crc=check_crc)
    walked = iter(walk)
    records = 0
    while interpreted(_WALK_STEP):
        records += sum(1 for _ in islice(walked, _WALK_STEP))
        if walk.stop is not None:
            return Extent(walk.position, records, walk.stop, walk.blank_size, walk.error)
    pos = walk.position
    for _ in range(_LIVE_RESCANS):
        u8 = np.frombuffer(buf, dtype=np.uint8)
        try:
            more, pos, stop, blank_size = _scan(u8, pos, limit, check_crc, crc32_function())
        finally:
            del u8  # an mmap cannot close while a numpy view of it lives
        records += more
        if stop != _STOP_CORRUPT:
            return Extent(pos, records, _STOPS[stop], blank_size, None)
        try:
            decode_record(buf, pos, limit, check_crc=check_crc)
        except CorruptDataError as exc:
            return Extent(pos, records, "corrupt", 0, exc)
        # Whole when read again: a writer was copying it in (a segment being written, read
        # through a mapping of the same file). The walk goes on from it.
    changing = CorruptDataError(f"the record changed under each of {_LIVE_RESCANS} reads", offset=pos)
    return Extent(pos, records, "corrupt", 0, changing)


def message_starts(
    buf: Buffer, start: int = 0, end: int | None = None
) -> tuple[npt.NDArray[np.int64], int, bool]:
    """Positions of the consecutive MESSAGE records from ``start``, the position after the last
    of them, and whether a BLANK record follows there. Only sizes and magic codes are read:
    for ranges already validated (by recovery, or because this store wrote them)."""
    limit = len(buf) if end is None else min(end, len(buf))
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        starts, walked_to = _message_starts(u8, start, limit)
    finally:
        del u8
    blank = walked_to + 8 <= len(buf) and _MAGIC.unpack_from(buf, walked_to + 4)[0] == BLANK_MAGIC
    return starts, walked_to, blank


def store_timestamps(buf: Buffer, starts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """STORETIMESTAMP of the records at ``starts`` (MESSAGE records known to be well formed)."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        return _store_timestamps(u8, starts)
    finally:
        del u8


@kernel(cache=True, nogil=True)
def _store_timestamps(u8: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    out = np.empty(len(starts), dtype=np.int64)
    for i in range(len(starts)):
        out[i] = read_i64(u8, _field_positions(u8, starts[i])[0])
    return out


# what a power cut leaves unwritten of a file: whole pages of the page cache
_PAGE: Final = 4096


def first_torn_record(buf: Buffer, starts: npt.NDArray[np.int64]) -> int:
    """Index of the first of the well-formed MESSAGE records at ``starts`` (in ``buf``, a
    segment mapped from its byte 0) that a lost page tore where no check sees it, or -1.

    The lengths make a record's fields consistent and BODYCRC covers the body, but nothing
    covers the TOPIC and PROPERTIES bytes: a page of them never written back reads as zeros
    while every length still adds up. A topic holds no zero byte, and properties are
    ``name\x01value\x02`` pairs: a zero byte in the topic, or a page's piece of the properties
    all zeros, is such a tear."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        return int(_first_torn_record(u8, starts, _PAGE))
    finally:
        del u8


@kernel(cache=True, nogil=True)
def _first_torn_record(u8: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], page: int) -> int:
    for i in range(len(starts)):
        topic_at, topic_len, props_at, props_len, _ = record_layout(u8, starts[i])
        for k in range(topic_at, topic_at + topic_len):
            if u8[k] == 0:
                return i
        end = props_at + props_len
        piece = props_at
        while piece < end:
            stop = min(end, (piece // page + 1) * page)
            zeros = True
            for k in range(piece, stop):
                if u8[k] != 0:
                    zeros = False
                    break
            if zeros:
                return i
            piece = stop
    return -1


# --- field readers for checks over many records (verify) -------------------------------------
@kernel(cache=True, nogil=True)
def find_record_start(u8: npt.NDArray[np.uint8], start: int, limit: int, seg_start: int) -> int:
    """The first position from ``start`` that looks like a MESSAGE record of this segment (its magic,
    and a PHYSICALOFFSET naming that very position), or -1: where a scan may pick up again after
    a damaged record."""
    q = start
    while q + _RESYNC_TAIL <= limit:
        if (
            u8[q + 4] == 0xDA
            and u8[q + 5] == 0xA3
            and u8[q + 6] == 0x20
            and (u8[q + 7] == 0xA7 or u8[q + 7] == 0xAB)  # MESSAGE_MAGIC_V1 or _V2
            and read_i64(u8, q + _PHYSICALOFFSET_AT) == seg_start + q
        ):
            return q
        q += 1
    return -1


@kernel(cache=True, nogil=True)
def record_header(u8: npt.NDArray[np.uint8], pos: int) -> tuple[int, int, int, int]:
    """(TOTALSIZE, QUEUEID, QUEUEOFFSET, SYSFLAG) of the well-formed MESSAGE record at ``pos``."""
    return (
        read_i32(u8, pos),
        read_i32(u8, pos + _QUEUEID_AT),
        read_i64(u8, pos + _QUEUEOFFSET_AT),
        read_i32(u8, pos + _SYSFLAG_AT),
    )


@kernel(cache=True, nogil=True)
def record_layout(u8: npt.NDArray[np.uint8], pos: int) -> tuple[int, int, int, int, int]:
    """(topic start, topic length, properties start, properties length, store timestamp)."""
    store_ts_at, body_len_at = _field_positions(u8, pos)
    store_ts = read_i64(u8, store_ts_at)
    t = body_len_at + 4 + read_i32(u8, body_len_at)
    if read_i32(u8, pos + 4) == MESSAGE_MAGIC_V2:
        topic_len = (np.int64(u8[t]) << 8) | u8[t + 1]
        t += 2
    else:
        topic_len = np.int64(u8[t])
        t += 1
    props_at = t + topic_len
    props_len = (np.int64(u8[props_at]) << 8) | u8[props_at + 1]
    return t, int(topic_len), props_at + 2, int(props_len), store_ts


# --- columnar reads: many records' fields and bodies without a Python object per record -------
@kernel(cache=True, nogil=True, inline="always")
def _readable_at(u8: npt.NDArray[np.uint8], p: int, size: int, limit: int) -> tuple[int, int]:
    """(STORETIMESTAMP's position, BODYLENGTH's) in the record at ``p`` that its consume-queue
    entry says is ``size`` bytes, or (-1, -1) when it is not readable: it lies below ``limit``,
    its TOTALSIZE is ``size``, its MAGICCODE a message's and its body fits inside it."""
    if p < 0 or size < 88 or p + size > limit or read_i32(u8, p) != size:
        return -1, -1
    magic = read_i32(u8, p + 4)
    if magic != MESSAGE_MAGIC_V1 and magic != MESSAGE_MAGIC_V2:
        return -1, -1
    store_ts_at, length_at = _field_positions(u8, p)
    blen = read_i32(u8, length_at)
    if blen < 0 or length_at + 4 + blen > p + size:
        return -1, -1
    return store_ts_at, length_at


@kernel(cache=True, nogil=True)
def _gather(
    u8: npt.NDArray[np.uint8], positions: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64], limit: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
    """(born timestamps, store timestamps, body starts, body lengths, how many records in a row
    are readable; see ``_readable_at``)."""
    n = len(positions)
    born = np.empty(n, dtype=np.int64)
    stored = np.empty(n, dtype=np.int64)
    body_at = np.empty(n, dtype=np.int64)
    body_len = np.empty(n, dtype=np.int64)
    for i in range(n):
        p = positions[i]
        store_ts_at, length_at = _readable_at(u8, p, sizes[i], limit)
        if length_at < 0:
            return born, stored, body_at, body_len, i
        born[i] = read_i64(u8, p + 40)
        stored[i] = read_i64(u8, store_ts_at)
        body_at[i] = length_at + 4
        body_len[i] = read_i32(u8, length_at)
    return born, stored, body_at, body_len, n


@kernel(cache=True, nogil=True)
def _plain_run(
    entries: npt.NDArray[np.uint8],
    max_count: int,
    max_bytes: int,
    u8: npt.NDArray[np.uint8],
    segment_from: int,
    segment_end: int,
    limit: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
    """``plain_run``: (positions, sizes, how many), how many -1 when a taken record is not
    readable in the segment."""
    count = min(len(entries) // CQ_ENTRY_SIZE, max_count)
    positions = np.empty(count, dtype=np.int64)
    sizes = np.empty(count, dtype=np.int64)
    total = 0
    n = 0
    while n < count:
        size = entry_size(entries, n)
        total += size
        if n > 0 and total > max_bytes:
            break
        phys = entry_offset(entries, n)
        p = phys - segment_from
        if phys >= segment_end or _readable_at(u8, p, size, limit)[1] < 0:
            return positions, sizes, -1
        positions[n] = p
        sizes[n] = size
        n += 1
    return positions[:n], sizes[:n], n


@kernel(cache=True, nogil=True)
def _copy_spans(
    u8: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    out: npt.NDArray[np.uint8],
    out_at: int,
) -> None:
    q = out_at
    for i in range(len(starts)):
        q = copy_bytes(out, q, u8, starts[i], lengths[i])


def gather_records(
    buf: Buffer, positions: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64], limit: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
    """Born and store timestamps, body starts and lengths of the records at ``positions`` of one
    segment (each ``sizes[i]`` bytes, as its consume-queue entry says), and how many of them, from
    the first, are readable below ``limit``."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        # a few records (a consumer's batch) as Python while numba is not loaded: see jit.small
        return small(_gather, len(positions), u8, positions.astype(np.int64), sizes.astype(np.int64), limit)
    finally:
        del u8


def plain_run(
    entries: Buffer, max_count: int, max_bytes: int, buf: Buffer, segment_from: int, limit: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """The records a plain read takes, listed by the consume-queue ``entries`` (raw, the first
    one's record in the segment ``buf`` that starts at commitlog offset ``segment_from``): the
    first ``max_count`` at most, and as many as fit in ``max_bytes`` (the first one always), as
    (their positions in the segment, their sizes); None when one of them is not a readable
    record of this segment below ``limit`` (a record gone, damaged, or in the next segment), or
    when it is to take none (``max_count`` < 1)."""
    if max_count < 1:
        return None
    e8 = np.frombuffer(entries, dtype=np.uint8)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        positions, sizes, n = small(
            _plain_run, max_count, e8, max_count, max_bytes, u8, segment_from, segment_from + len(u8), limit
        )
    finally:
        del e8, u8
    return None if n < 0 else (positions, sizes)


def copy_spans(
    buf: Buffer, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64], out: bytearray, out_at: int
) -> None:
    """Copy the spans at ``starts`` (``lengths`` bytes each) of a segment back to back into ``out``
    from ``out_at``: bodies for columns, whole records for a pull's answer."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    dest = np.frombuffer(out, dtype=np.uint8)
    try:
        _copy_spans(u8, starts, lengths, dest, out_at)
    finally:
        del u8, dest


# --- every field of many records, and the records of a byte range (the Spark source) ---------
RECORD_FIELDS: Final = (
    "total_size",
    "body_crc",
    "queue_id",
    "flag",
    "queue_offset",
    "physical_offset",
    "sys_flag",
    "born_timestamp",
    "born_host_at",
    "store_timestamp",
    "store_host_at",
    "reconsume_times",
    "prepared_transaction_offset",
    "body_at",
    "body_len",
    "topic_at",
    "topic_len",
    "properties_at",
    "properties_len",
)


@kernel(cache=True, nogil=True, inline="always")
def read_record_fields(
    u8: npt.NDArray[np.uint8], p: int
) -> tuple[int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int]:
    """The ``RECORD_FIELDS`` of the well-formed MESSAGE record at ``p``, in that order: one
    record's row of ``record_fields``, for compiled callers."""
    store_ts_at, body_len_at = _field_positions(u8, p)
    topic_at, topic_len, props_at, props_len, store_ts = record_layout(u8, p)
    after_hosts = body_len_at - 12  # RECONSUMETIMES
    return (
        read_i32(u8, p),
        read_i32(u8, p + 8),
        read_i32(u8, p + _QUEUEID_AT),
        read_i32(u8, p + 16),
        read_i64(u8, p + _QUEUEOFFSET_AT),
        read_i64(u8, p + _PHYSICALOFFSET_AT),
        read_i32(u8, p + _SYSFLAG_AT),
        read_i64(u8, p + 40),
        p + _BORNHOST_AT,
        store_ts,
        store_ts_at + 8,  # STOREHOST
        read_i32(u8, after_hosts),
        read_i64(u8, after_hosts + 4),
        body_len_at + 4,
        read_i32(u8, body_len_at),
        topic_at,
        topic_len,
        props_at,
        props_len,
    )


@kernel(cache=True, nogil=True)
def _record_fields(u8: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    n = len(starts)
    out = np.empty((19, n), dtype=np.int64)
    for i in range(n):
        (
            out[0, i],
            out[1, i],
            out[2, i],
            out[3, i],
            out[4, i],
            out[5, i],
            out[6, i],
            out[7, i],
            out[8, i],
            out[9, i],
            out[10, i],
            out[11, i],
            out[12, i],
            out[13, i],
            out[14, i],
            out[15, i],
            out[16, i],
            out[17, i],
            out[18, i],
        ) = read_record_fields(u8, starts[i])
    return out


def record_fields(buf: Buffer, starts: npt.NDArray[np.int64]) -> dict[str, npt.NDArray[np.int64]]:
    """Every header field of the well-formed MESSAGE records at ``starts``, by ``RECORD_FIELDS``
    name, plus where the hosts, body, topic and properties lie in ``buf`` (``*_at``, ``*_len``)."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        table = _record_fields(u8, starts.astype(np.int64, copy=False))
    finally:
        del u8
    return dict(zip(RECORD_FIELDS, table))


@kernel(cache=True, nogil=True)
def _boundary(
    u8: npt.NDArray[np.uint8], at: int, limit: int, seg_start: int, crc_fn: npt.NDArray[np.int64]
) -> int:
    """The first record start at or after ``at``: a MESSAGE record that names its own position as
    its PHYSICALOFFSET and is whole, body CRC included. Two readers given the same ``at`` agree
    without talking to each other, which is what lets a segment be split into byte ranges."""
    if at == 0:
        return 0
    q = at
    while True:
        q = find_record_start(u8, q, limit, seg_start)
        if q < 0:
            return limit
        total = read_i32(u8, q)
        if 0 < total <= limit - q and _message_is_valid(
            u8, q, total, read_i32(u8, q + 4) == MESSAGE_MAGIC_V2, True, crc_fn
        ):
            return q
        q += 1


def next_record_start(buf: Buffer, at: int, limit: int, seg_start: int) -> int:
    """The first start of a whole, valid MESSAGE record (body CRC included) at or after ``at``
    (> 0) in segment ``buf`` at log offset ``seg_start``, or ``limit`` if there is none: where a
    walk picks up again after a damaged record."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        return int(_boundary(u8, at, min(limit, len(buf)), seg_start, crc32_function()))
    finally:
        del u8


@kernel(cache=True, nogil=True)
def _range_starts(
    u8: npt.NDArray[np.uint8],
    begin: int,
    end: int,
    limit: int,
    seg_start: int,
    crc_fn: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    first = _boundary(u8, begin, limit, seg_start, crc_fn)
    stop = limit if end >= limit else _boundary(u8, end, limit, seg_start, crc_fn)
    starts = np.empty(max(0, (stop - first) // 40 + 1), dtype=np.int64)
    damaged = np.empty(2 * len(starts) + 2, dtype=np.int64)  # [from, to) pairs
    n = 0
    d = 0
    pos = first
    while pos < stop and pos + 8 <= limit:
        total = read_i32(u8, pos)
        magic = read_i32(u8, pos + 4)
        if magic == BLANK_MAGIC or (total == 0 and magic == 0):
            break
        if (
            (magic == MESSAGE_MAGIC_V1 or magic == MESSAGE_MAGIC_V2)  # noqa: SIM109 (numba)
            and 0 < total <= limit - pos
            and _message_is_valid(u8, pos, total, magic == MESSAGE_MAGIC_V2, False, crc_fn)
        ):
            starts[n] = pos
            n += 1
            pos += total
            continue
        resume = _boundary(u8, pos + 1, limit, seg_start, crc_fn)
        damaged[d] = pos
        damaged[d + 1] = min(resume, stop)
        d += 2
        pos = resume
    return starts[:n].copy(), damaged[:d].copy()


def range_starts(
    buf: Buffer, begin: int, end: int, limit: int, seg_start: int
) -> tuple[npt.NDArray[np.int64], list[tuple[int, int]]]:
    """Starts of the records of segment ``buf`` (at log offset ``seg_start``) that belong to the
    byte range [begin, end): those from the first record start at or after ``begin`` up to the
    first at or after ``end`` (see ``_boundary``), so consecutive ranges share every record out
    exactly once. ``limit`` is where the segment's data ends for this reader. Damaged stretches
    are stepped over to the next record start and returned as (from, to) pairs."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        starts, damaged = _range_starts(u8, begin, end, min(limit, len(buf)), seg_start, crc32_function())
    finally:
        del u8
    return starts, [(int(a), int(b)) for a, b in damaged.reshape(-1, 2)]


@kernel(cache=True, nogil=True)
def record_is_well_formed(
    u8: npt.NDArray[np.uint8], p: int, size: int, crc_fn: npt.NDArray[np.int64]
) -> bool:
    """``well_formed`` of one record, for compiled callers."""
    if p < 0 or size < 40 or p + size > len(u8) or read_i32(u8, p) != size:
        return False
    magic = read_i32(u8, p + 4)
    if magic != MESSAGE_MAGIC_V1 and magic != MESSAGE_MAGIC_V2:
        return False
    return _message_is_valid(u8, p, size, magic == MESSAGE_MAGIC_V2, False, crc_fn)


@kernel(cache=True, nogil=True)
def _well_formed(
    u8: npt.NDArray[np.uint8],
    positions: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    crc_fn: npt.NDArray[np.int64],
) -> npt.NDArray[np.bool_]:
    out = np.zeros(len(positions), dtype=np.bool_)
    for i in range(len(positions)):
        out[i] = record_is_well_formed(u8, positions[i], sizes[i], crc_fn)
    return out


def well_formed(
    buf: Buffer, positions: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """Whether a well-formed MESSAGE record of ``sizes[i]`` bytes starts at each of ``positions``
    (consume-queue entries checked against the segment before their records are read)."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        return _well_formed(
            u8, positions.astype(np.int64, copy=False), sizes.astype(np.int64, copy=False), crc32_function()
        )
    finally:
        del u8
