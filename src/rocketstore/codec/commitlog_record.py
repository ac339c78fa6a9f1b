"""The commitlog record: the only module that packs or unpacks its bytes.

MESSAGE record (big-endian; ``b`` = born host length, ``s`` = store host length, 8 for IPv4
and 20 for IPv6, chosen by sysflag bits 0x10 / 0x20)::

    pos        size  field
    0          4     TOTALSIZE          whole record, this field included
    4          4     MAGICCODE          0xDAA320A7 (4.x, written) or 0xDAA320AB (5.x: TOPICLENGTH is a short)
    8          4     BODYCRC            zlib.crc32(body) & 0x7FFFFFFF
    12         4     QUEUEID
    16         4     FLAG
    20         8     QUEUEOFFSET        patched under the append lock
    28         8     PHYSICALOFFSET     patched under the append lock
    36         4     SYSFLAG
    40         8     BORNTIMESTAMP
    48         b     BORNHOST           address + int port
    48+b       8     STORETIMESTAMP     patched under the append lock
    56+b       s     STOREHOST
    56+b+s     4     RECONSUMETIMES
    60+b+s     8     PREPAREDTRANSACTIONOFFSET
    68+b+s     4     BODYLENGTH
    72+b+s     n     BODY
    ...        1|2   TOPICLENGTH        byte (4.x) or short (5.x)
    ...        t     TOPIC              UTF-8
    ...        2     PROPERTIESLENGTH   short
    ...        p     PROPERTIES         UTF-8, see codec.properties

BLANK record: TOTALSIZE = bytes left in the segment, MAGICCODE = 0xCBD43194, nothing else
meaningful. A segment always keeps room for one (8 bytes), so a reader that meets it jumps to
the next segment, and every segment parses on its own from byte 0.

Decoding checks every length against the buffer and TOTALSIZE against the sum of the parts
before it allocates anything, so a corrupt length field cannot drive a huge allocation or a
read past the record. Topic and properties are decoded leniently, as RocketMQ does.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from rocketstore.codec.big_endian import put_int
from rocketstore.codec.byte_copy import copy_bytes
from rocketstore.codec.crc import crc32, crc32_function
from rocketstore.errors import CorruptDataError
from rocketstore.jit import kernel

__all__ = [
    "BLANK_MAGIC",
    "END_FILE_MIN_BLANK_LENGTH",
    "MAX_PROPERTIES_BYTES",
    "MESSAGE_MAGIC_V1",
    "MESSAGE_MAGIC_V2",
    "MIN_RECORD_SIZE",
    "SYSFLAG_BORNHOST_V6",
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_COMPRESSION_TYPE",
    "SYSFLAG_CONTENT",
    "SYSFLAG_MULTI_TAGS",
    "SYSFLAG_STOREHOST_V6",
    "SYSFLAG_TX_MASK",
    "TX_COMMIT",
    "TX_NOT",
    "TX_PREPARED",
    "TX_ROLLBACK",
    "DecodedRecord",
    "RecordTemplate",
    "ScanStop",
    "SegmentScan",
    "body_crc",
    "body_span",
    "decode_record",
    "encode_batch",
    "encode_blank",
    "encode_message",
    "patch_positions",
    "patch_positions_many",
    "record_length",
    "store_timestamp_position",
    "write_record",
]

MESSAGE_MAGIC_V1: Final = -626843481  # 0xDAA320A7
MESSAGE_MAGIC_V2: Final = -626843477  # 0xDAA320AB
BLANK_MAGIC: Final = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH: Final = 8
# PROPERTIESLENGTH is a Java short: the longest properties string a record (or a producer's
# batch entry) holds
MAX_PROPERTIES_BYTES: Final = 0x7FFF

SYSFLAG_COMPRESSED: Final = 0x1
SYSFLAG_MULTI_TAGS: Final = 0x2
SYSFLAG_TX_MASK: Final = 0xC
TX_NOT: Final = 0x0
TX_PREPARED: Final = 0x4
TX_COMMIT: Final = 0x8
TX_ROLLBACK: Final = 0xC
SYSFLAG_BORNHOST_V6: Final = 0x10
SYSFLAG_STOREHOST_V6: Final = 0x20
# bits 8-10: the compression of a compressed body (0x100 LZ4, 0x200 ZSTD, 0x300 or 0 ZLIB), as
# RocketMQ 4.9.8's client sets them; the body is stored as sent, so the bits stay with it
SYSFLAG_COMPRESSION_TYPE: Final = 0x700
# what describes the body and tags, kept when a message is copied (delivery of a delayed
# message, commit of a half): everything but the transaction type and the host bits
SYSFLAG_CONTENT: Final = SYSFLAG_COMPRESSED | SYSFLAG_MULTI_TAGS | SYSFLAG_COMPRESSION_TYPE

_SIZE_MAGIC = struct.Struct(">ii")
_PREFIX = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP
assert _PREFIX.size == 48
_POSITIONS = struct.Struct(">qq")  # QUEUEOFFSET, PHYSICALOFFSET at byte 20
_QUEUE_OFFSET_POS: Final = 20
_TIMESTAMP = struct.Struct(">q")
_BODY_LEN_POS_BASE: Final = 68  # + b + s
_SYSFLAG = struct.Struct(">i")
_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")


def _host_len(v6: bool) -> int:
    return 20 if v6 else 8


# Everything from BORNHOST to BODYLENGTH, one Struct per (born v6, store v6).
_MIDDLE: dict[tuple[bool, bool], struct.Struct] = {
    (b6, s6): struct.Struct(f">{16 if b6 else 4}siq{16 if s6 else 4}siiqi")
    for b6 in (False, True)
    for s6 in (False, True)
}
# The whole fixed head, TOTALSIZE to BODYLENGTH, for encoding in one call.
_HEAD: dict[tuple[bool, bool], struct.Struct] = {
    key: struct.Struct(">iiiiiqqiq" + mid.format[1:]) for key, mid in _MIDDLE.items()
}
for (_b6, _s6), _s in _HEAD.items():
    assert _s.size == _BODY_LEN_POS_BASE + 4 + _host_len(_b6) + _host_len(_s6)

MIN_RECORD_SIZE: Final = _BODY_LEN_POS_BASE + 4 + 8 + 8 + 1 + 2  # empty body, topic, properties


def record_length(sys_flag: int, body_len: int, topic_len: int, props_len: int, v2: bool = False) -> int:
    """TOTALSIZE of a MESSAGE record with these parts."""
    return (
        _BODY_LEN_POS_BASE
        + 4
        + _host_len(bool(sys_flag & SYSFLAG_BORNHOST_V6))
        + _host_len(bool(sys_flag & SYSFLAG_STOREHOST_V6))
        + body_len
        + (2 if v2 else 1)
        + topic_len
        + 2
        + props_len
    )


def store_timestamp_position(sys_flag: int) -> int:
    """Offset of STORETIMESTAMP inside a record with this sysflag."""
    return 48 + _host_len(bool(sys_flag & SYSFLAG_BORNHOST_V6))


def body_crc(body: bytes | bytearray | memoryview) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_message(
    *,
    body: bytes | bytearray | memoryview,
    topic: bytes,
    properties: bytes,
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_addr: bytes,
    born_port: int,
    store_addr: bytes,
    store_port: int,
    store_timestamp: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    crc: int | None = None,
) -> bytearray:
    """A complete 4.x MESSAGE record (a bytearray, like ``RecordTemplate.encode``'s, so an append
    can patch its positions in before copying it). ``sys_flag`` must already carry the host v6 bits.

    Callers validate lengths first (topic <= 127 bytes, properties <= 32767 bytes); a value
    that does not fit its field raises ``struct.error`` here rather than writing garbage.
    """
    key = (bool(sys_flag & SYSFLAG_BORNHOST_V6), bool(sys_flag & SYSFLAG_STOREHOST_V6))
    total = record_length(sys_flag, len(body), len(topic), len(properties))
    head = _HEAD[key].pack(
        total,
        MESSAGE_MAGIC_V1,
        body_crc(body) if crc is None else crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_addr,
        born_port,
        store_timestamp,
        store_addr,
        store_port,
        reconsume_times,
        prepared_transaction_offset,
        len(body),
    )
    if len(topic) > 127:
        raise struct.error("topic longer than 127 bytes")
    return bytearray().join((head, body, bytes((len(topic),)), topic, _I16.pack(len(properties)), properties))


class RecordTemplate:
    """Encodes records that share a topic, born host and store host: the per-record work of a
    batch is one ``struct.pack``, one CRC and one join (used by the batch put path)."""

    __slots__ = ("_born", "_head", "_store", "_sys_flag_hosts", "_tail", "timestamp_position")

    def __init__(
        self, topic: bytes, born_addr: bytes, born_port: int, store_addr: bytes, store_port: int
    ) -> None:
        if not 0 < len(topic) <= 127:
            raise struct.error("a topic takes 1 to 127 bytes")
        b6, s6 = len(born_addr) == 16, len(store_addr) == 16
        self._sys_flag_hosts = (SYSFLAG_BORNHOST_V6 if b6 else 0) | (SYSFLAG_STOREHOST_V6 if s6 else 0)
        self._head = _HEAD[(b6, s6)]
        self._born = (born_addr, born_port)
        self._store = (store_addr, store_port)
        self._tail = bytes((len(topic),)) + topic
        self.timestamp_position = 48 + _host_len(b6)

    def encode(
        self,
        body: bytes | bytearray | memoryview,
        properties: bytes,
        queue_id: int,
        flag: int,
        sys_flag: int,
        born_timestamp: int,
    ) -> tuple[bytearray, int]:
        """(record, full sysflag) for a body and properties; positions and store time left 0
        (a bytearray, so the append can patch them in before copying it)."""
        sys_flag |= self._sys_flag_hosts
        tail = self._tail
        total = self._head.size + len(body) + len(tail) + 2 + len(properties)
        head = self._head.pack(
            total,
            MESSAGE_MAGIC_V1,
            zlib.crc32(body) & 0x7FFFFFFF,
            queue_id,
            flag,
            0,
            0,
            sys_flag,
            born_timestamp,
            *self._born,
            0,
            *self._store,
            0,
            0,
            len(body),
        )
        return bytearray().join((head, body, tail, _I16.pack(len(properties)), properties)), sys_flag


def encode_batch(
    topic: bytes,
    host: bytes,
    bodies: bytes,
    body_lengths: npt.NDArray[np.int64],
    properties: npt.NDArray[np.uint8],
    properties_lengths: npt.NDArray[np.int64],
    queue_ids: npt.NDArray[np.int64],
    flags: npt.NDArray[np.int64],
    born_timestamps: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Records of one topic, born and stored at ``host`` (address + big-endian int port, 8 or
    20 bytes), encoded back to back by one compiled loop: (blob, starts, lengths). Bodies and
    properties come concatenated with their lengths; every field is as ``RecordTemplate.encode``
    writes it (positions and store time left 0). Callers validate: nothing here is checked."""
    v6 = len(host) == 20
    return _encode_records(
        np.frombuffer(bodies, dtype=np.uint8),
        body_lengths,
        np.frombuffer(bytes((len(topic),)) + topic, dtype=np.uint8),
        properties,
        properties_lengths,
        queue_ids,
        flags,
        born_timestamps,
        (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6) if v6 else 0,
        np.frombuffer(host, dtype=np.uint8),
        crc32_function(),
    )


@kernel(cache=True, nogil=True, inline="always")
def write_record(
    out: npt.NDArray[np.uint8],
    p: int,
    length: int,
    bodies: npt.NDArray[np.uint8],
    body_at: int,
    body_length: int,
    props: npt.NDArray[np.uint8],
    props_at: int,
    props_length: int,
    extra: npt.NDArray[np.uint8],
    extra_at: int,
    extra_length: int,
    separate: bool,
    tails: npt.NDArray[np.uint8],
    tail_at: int,
    tail_length: int,
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_hosts: npt.NDArray[np.uint8],
    born_host_at: int,
    born_host_length: int,
    store_host: npt.NDArray[np.uint8],
    reconsume_times: int,
    crc_fn: npt.NDArray[np.int64],
) -> None:
    """One MESSAGE record of ``length`` bytes at ``out[p:]`` (zeroed), for compiled encoders:
    the body and properties (then, when ``extra_length``, a 0x02 if ``separate`` and the extra
    properties) are spans of their arrays; the tail (TOPICLENGTH, TOPIC) and born host (address
    + big-endian int port) too. QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP are left 0 for
    the append lock; ``sys_flag`` must carry the host v6 bits."""
    put_int(out, p, length, 4)
    put_int(out, p + 4, MESSAGE_MAGIC_V1, 4)
    put_int(out, p + 8, crc32(bodies, body_at, body_length, crc_fn) & 0x7FFFFFFF, 4)
    put_int(out, p + 12, queue_id, 4)
    put_int(out, p + 16, flag, 4)
    put_int(out, p + 36, sys_flag, 4)
    put_int(out, p + 40, born_timestamp, 8)
    q = copy_bytes(out, p + 48, born_hosts, born_host_at, born_host_length)
    q = copy_bytes(out, q + 8, store_host, 0, len(store_host))  # after STORETIMESTAMP
    put_int(out, q, reconsume_times, 4)
    q += 4 + 8  # PREPAREDTRANSACTIONOFFSET: 0
    put_int(out, q, body_length, 4)
    q = copy_bytes(out, q + 4, bodies, body_at, body_length)
    q = copy_bytes(out, q, tails, tail_at, tail_length)
    stored = props_length
    if extra_length > 0:
        stored += extra_length + (1 if separate else 0)
    put_int(out, q, stored, 2)
    q = copy_bytes(out, q + 2, props, props_at, props_length)
    if extra_length > 0:
        if separate:
            out[q] = 2
            q += 1
        copy_bytes(out, q, extra, extra_at, extra_length)


# Lets the GIL go: the dispatcher works through earlier batches on the other core meanwhile
# (measured, put + dispatch: batches of 4096 1.09-1.25 M msgs/s holding it, 1.29-1.47 M letting
# it go; batches of 256 about 480 K / 520 K). The batch path's other kernels are a few
# microseconds long and keep the GIL: getting it back costs more than they would share.
@kernel(cache=True, nogil=True)
def _encode_records(
    bodies: npt.NDArray[np.uint8],
    body_lengths: npt.NDArray[np.int64],
    tail: npt.NDArray[np.uint8],
    props: npt.NDArray[np.uint8],
    props_lengths: npt.NDArray[np.int64],
    queue_ids: npt.NDArray[np.int64],
    flags: npt.NDArray[np.int64],
    born: npt.NDArray[np.int64],
    sys_flag: int,
    host: npt.NDArray[np.uint8],
    crc_fn: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    n = len(body_lengths)
    h = len(host)
    t = len(tail)
    head = 72 + 2 * h  # TOTALSIZE .. BODYLENGTH, born and store hosts included
    starts = np.empty(n, dtype=np.int64)
    lengths = np.empty(n, dtype=np.int64)
    total = 0
    for i in range(n):
        starts[i] = total
        lengths[i] = head + body_lengths[i] + t + 2 + props_lengths[i]
        total += lengths[i]
    out = np.zeros(total, dtype=np.uint8)
    body_at = 0
    props_at = 0
    for i in range(n):
        blen = body_lengths[i]
        plen = props_lengths[i]
        write_record(
            out, starts[i], lengths[i], bodies, body_at, blen, props, props_at, plen, props, 0, 0, False,
            tail, 0, t, queue_ids[i], flags[i], sys_flag, born[i], host, 0, h, host, 0, crc_fn,
        )  # fmt: skip
        body_at += blen
        props_at += plen
    return out, starts, lengths


def patch_positions(
    buf: bytearray | memoryview | mmap.mmap,
    pos: int,
    timestamp_position: int,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
) -> None:
    """Write the three fields only known under the append lock into a record at ``pos``.

    ``timestamp_position`` is ``store_timestamp_position(sys_flag)``, computed once per record
    outside the lock.
    """
    _POSITIONS.pack_into(buf, pos + _QUEUE_OFFSET_POS, queue_offset, physical_offset)
    _TIMESTAMP.pack_into(buf, pos + timestamp_position, store_timestamp)


def patch_positions_many(
    blob: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    queue_offsets: npt.NDArray[np.int64],
    physical_offsets: npt.NDArray[np.int64],
    store_timestamp: int,
) -> None:
    """``patch_positions`` for many records of ``blob`` at once (records at ``starts``; each
    record's own sysflag says where its STORETIMESTAMP sits)."""
    n = len(starts)
    if n == 0:
        return
    _patch_positions(blob, starts, queue_offsets, physical_offsets, store_timestamp)


@kernel(cache=True)
def _patch_positions(
    blob: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    queue_offsets: npt.NDArray[np.int64],
    physical_offsets: npt.NDArray[np.int64],
    store_timestamp: int,
) -> None:
    for i in range(len(starts)):
        p = starts[i]
        put_int(blob, p + _QUEUE_OFFSET_POS, queue_offsets[i], 8)
        put_int(blob, p + _QUEUE_OFFSET_POS + 8, physical_offsets[i], 8)
        born_v6 = blob[p + 39] & SYSFLAG_BORNHOST_V6  # SYSFLAG's low byte
        put_int(blob, p + 48 + (20 if born_v6 else 8), store_timestamp, 8)


def body_span(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """(start, length) of the body of the MESSAGE record at ``pos``, without decoding the rest.

    Raises CorruptDataError when the body does not fit inside the record's TOTALSIZE.
    """
    if pos < 0 or pos + 40 > len(buf):
        raise _corrupt("truncated record: no room for the header", pos)
    total = _SIZE_MAGIC.unpack_from(buf, pos)[0]
    sys_flag = _SYSFLAG.unpack_from(buf, pos + 36)[0]
    len_pos = (
        pos
        + _BODY_LEN_POS_BASE
        + _host_len(bool(sys_flag & SYSFLAG_BORNHOST_V6))
        + _host_len(bool(sys_flag & SYSFLAG_STOREHOST_V6))
    )
    end = min(pos + total, len(buf))
    if len_pos + 4 > end:
        raise _corrupt(f"TOTALSIZE {total} is too small for the record header", pos)
    body_len = _SYSFLAG.unpack_from(buf, len_pos)[0]
    start = len_pos + 4
    if body_len < 0 or start + body_len > end:
        raise _corrupt(f"BODYLENGTH {body_len} does not fit in TOTALSIZE {total}", pos)
    return start, body_len


def encode_blank(size: int) -> bytes:
    """The 8 meaningful bytes of a BLANK record that fills ``size`` bytes."""
    return _SIZE_MAGIC.pack(size, BLANK_MAGIC)


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    """Every field of a MESSAGE record at ``position`` (a position in the decoded buffer).

    The body is not copied: ``body_start``/``body_len`` locate it in the buffer.
    """

    position: int
    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_addr: bytes
    born_port: int
    store_timestamp: int
    store_addr: bytes
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body_start: int
    body_len: int
    topic: str
    properties: str


def _corrupt(reason: str, pos: int) -> CorruptDataError:
    return CorruptDataError(reason, offset=pos)


def decode_record(
    buf: bytes | bytearray | memoryview, pos: int, end: int | None = None, *, check_crc: bool = False
) -> DecodedRecord:
    """Decode the MESSAGE record at ``buf[pos:]``; ``end`` bounds the readable bytes.

    Raises CorruptDataError (``offset`` = ``pos``) for a BLANK record, an unknown magic, a length
    that leaves the buffer or disagrees with TOTALSIZE, bad UTF-8, or (``check_crc``) a bad CRC.
    """
    limit = len(buf) if end is None else min(end, len(buf))
    if pos < 0 or pos + 8 > limit:
        raise _corrupt("truncated record: fewer than 8 bytes left for TOTALSIZE and MAGICCODE", pos)
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        raise _corrupt("BLANK record where a MESSAGE was expected", pos)
    if magic not in (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2):
        raise _corrupt(f"unknown magic code 0x{magic & 0xFFFFFFFF:08x}", pos)
    if total < MIN_RECORD_SIZE:
        raise _corrupt(f"TOTALSIZE {total} is smaller than the smallest record", pos)
    if pos + total > limit:
        raise _corrupt(f"TOTALSIZE {total} runs past the end of the data ({limit - pos} bytes left)", pos)
    (_, _, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts) = _PREFIX.unpack_from(
        buf, pos
    )
    key = (bool(sys_flag & SYSFLAG_BORNHOST_V6), bool(sys_flag & SYSFLAG_STOREHOST_V6))
    middle = _MIDDLE[key]
    if 48 + middle.size > total:
        raise _corrupt(f"TOTALSIZE {total} is too small for the record header", pos)
    (born_addr, born_port, store_ts, store_addr, store_port, reconsume, prepared, body_len) = (
        middle.unpack_from(buf, pos + 48)
    )
    body_start = pos + 48 + middle.size
    record_end = pos + total
    if body_len < 0 or body_start + body_len + 1 > record_end:
        raise _corrupt(f"BODYLENGTH {body_len} does not fit in TOTALSIZE {total}", pos)
    p = body_start + body_len
    v2 = magic == MESSAGE_MAGIC_V2
    if v2:
        if p + 2 > record_end:
            raise _corrupt("record ends inside TOPICLENGTH", pos)
        topic_len = _U16.unpack_from(buf, p)[0]
        p += 2
    else:
        topic_len = buf[p]
        p += 1
    if p + topic_len + 2 > record_end:
        raise _corrupt(f"TOPICLENGTH {topic_len} does not fit in TOTALSIZE {total}", pos)
    topic_raw = bytes(buf[p : p + topic_len])
    p += topic_len
    props_len = _I16.unpack_from(buf, p)[0]
    p += 2
    if props_len < 0 or p + props_len > record_end:
        raise _corrupt(f"PROPERTIESLENGTH {props_len} does not fit in TOTALSIZE {total}", pos)
    expected = record_length(sys_flag, body_len, topic_len, props_len, v2)
    if expected != total:
        raise _corrupt(f"TOTALSIZE {total} does not match the sum of the record's parts ({expected})", pos)
    if check_crc:
        actual = zlib.crc32(memoryview(buf)[body_start : body_start + body_len]) & 0x7FFFFFFF
        if actual != crc:
            raise _corrupt(f"body CRC mismatch: stored {crc}, computed {actual}", pos)
    # Lenient like RocketMQ (Java's new String(bytes, UTF_8) replaces bad bytes): the CRC does
    # not cover topic and properties, and recovery must not cut the log at a record RocketMQ
    # would keep. Consumers of the topic string validate it before using it as a path.
    topic = topic_raw.decode("utf-8", "replace")
    props = bytes(buf[p : p + props_len]).decode("utf-8", "replace")
    return DecodedRecord(
        pos,
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_ts,
        born_addr,
        born_port,
        store_ts,
        store_addr,
        store_port,
        reconsume,
        prepared,
        body_start,
        body_len,
        topic,
        props,
    )


ScanStop = Literal["blank", "end_of_data", "corrupt"]


class SegmentScan:
    """Walk the records of one commitlog segment held in ``buf``, from ``start`` to ``end``.

    Iterating yields each valid MESSAGE record. Iteration stops at a BLANK record
    (``stop == "blank"``), at zero-filled space or fewer than 8 bytes before ``end``
    (``"end_of_data"``), or at the first invalid record (``"corrupt"``, with ``error`` saying
    what was wrong). A corrupt record is never skipped. Afterwards ``position`` is the
    position just past the last valid record.
    """

    def __init__(
        self,
        buf: bytes | bytearray | memoryview,
        start: int = 0,
        end: int | None = None,
        *,
        check_crc: bool = False,
    ) -> None:
        self._buf = buf
        self.position = start
        self.end = len(buf) if end is None else min(end, len(buf))
        self._check_crc = check_crc
        self.stop: ScanStop | None = None
        self.blank_size = 0
        self.error: CorruptDataError | None = None

    def __iter__(self) -> Iterator[DecodedRecord]:
        buf, end, check_crc = self._buf, self.end, self._check_crc
        pos = self.position
        while True:
            if pos + 8 > end:
                self.stop = "end_of_data"
                return
            total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
            if magic == BLANK_MAGIC:
                self.stop, self.blank_size = "blank", total
                return
            if total == 0 and magic == 0:
                self.stop = "end_of_data"
                return
            try:
                rec = decode_record(buf, pos, end, check_crc=check_crc)
            except CorruptDataError as exc:
                self.stop, self.error = "corrupt", exc
                return
            self.position = pos = pos + total
            yield rec
