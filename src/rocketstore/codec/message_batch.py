"""RocketMQ's batch encoding of messages (``MessageDecoder.encodeMessages``): what a producer's
SEND_BATCH_MESSAGE carries and what ``MessageStore.put_encoded_batches`` stores. The only module
that packs or unpacks it. Inner messages back to back::

    4   TOTALSIZE     this inner message
    4   MAGICCODE     written as 0 (not checked)
    4   BODYCRC       written as 0 (not checked)
    4   FLAG
    4   BODYLENGTH, then BODY
    2   PROPERTIESLENGTH, then PROPERTIES (the properties string, codec.properties)

Every length is checked against TOTALSIZE and the body before anything is taken, so a damaged
batch is refused whole (``CorruptDataError``) and nothing of it is stored.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from rocketstore.codec.big_endian import read_i32
from rocketstore.codec.properties import is_name, property_entry
from rocketstore.errors import CorruptDataError
from rocketstore.jit import kernel

__all__ = ["BatchEntry", "BatchSpans", "EncodedBatch", "decode_batch", "encode_batch_body", "scan_batch"]

_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLENGTH
_PROPS_LEN = struct.Struct(">h")
_MIN_ENTRY: Final = _HEAD.size + 2
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class EncodedBatch:
    """Messages of one topic and queue in RocketMQ's batch encoding, as one producer sent them:
    each keeps its flag, body and properties string (TAGS, KEYS and UNIQ_KEY among them);
    ``properties`` are added to every message's. All share the born host (``host:port``), born
    time, ``sys_flag`` (the body's bits: compression) and reconsume count."""

    topic: str
    queue_id: int
    data: bytes
    born_host: str
    born_timestamp: int
    properties: Mapping[str, str] = field(default_factory=dict)
    sys_flag: int = 0
    reconsume_times: int = 0


@dataclass(frozen=True, slots=True)
class BatchSpans:
    """Where each inner message's parts lie in the batch: message i has flag ``flags[i]``, its
    body at ``body_at[i]`` (``body_lengths[i]`` bytes) and its properties string at
    ``properties_at[i]`` (``properties_lengths[i]`` bytes). ``named`` is the first message that
    holds a property of the names ``scan_batch`` looked for, and ``name`` which one (-1, -1:
    none does)."""

    flags: I64
    body_at: I64
    body_lengths: I64
    properties_at: I64
    properties_lengths: I64
    named: int
    name: int

    def __len__(self) -> int:
        return len(self.flags)


@dataclass(slots=True)
class BatchEntry:
    flag: int
    body: bytes
    properties: str


_CUT_SHORT, _BAD_TOTAL, _BAD_BODY, _BAD_PROPERTIES = 1, 2, 3, 4


def scan_batch(data: bytes | bytearray | memoryview, names: Sequence[str] = ()) -> BatchSpans:
    """The spans of a batch's inner messages, every length checked (``CorruptDataError`` names
    the first bad one), and the first message holding a property named in ``names``."""
    u8 = np.frombuffer(data, dtype=np.uint8)
    encoded = [n.encode() for n in names]
    name_bytes = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    name_offsets = np.cumsum([0, *map(len, encoded)]).astype(np.int64)
    table, count, problem, pos, named, name = _scan(u8, name_bytes, name_offsets)
    if problem:
        if problem == _CUT_SHORT:
            why = "is cut short"
        elif problem == _BAD_TOTAL:
            why = f"TOTALSIZE {_HEAD.unpack_from(data, pos)[0]} outside {_MIN_ENTRY}..{len(u8) - pos}"
        else:
            body_len = _HEAD.unpack_from(data, pos)[4]
            if problem == _BAD_BODY:
                why = f"body length {body_len} exceeds it"
            else:
                props_len = _PROPS_LEN.unpack_from(data, pos + _HEAD.size + body_len)[0]
                why = f"properties length {props_len} does not end at TOTALSIZE"
        raise CorruptDataError(f"batch message {count} at byte {pos}: {why}", offset=pos)
    table = table[:, :count]
    return BatchSpans(table[0], table[1], table[2], table[3], table[4], named, name)


@kernel(cache=True, nogil=True)
def _scan(
    u8: npt.NDArray[np.uint8], names: npt.NDArray[np.uint8], name_offsets: I64
) -> tuple[I64, int, int, int, int, int]:
    """(a row per span field, how many messages, a problem code (0: none) and where, the first
    message with a wanted name and which)."""
    n = len(u8)
    table = np.empty((5, n // _MIN_ENTRY + 1), dtype=np.int64)
    n_names = len(name_offsets) - 1
    named = -1
    name = -1
    count = 0
    pos = 0
    while pos < n:
        if n - pos < _MIN_ENTRY:
            return table, count, _CUT_SHORT, pos, named, name
        total = read_i32(u8, pos)
        if total < _MIN_ENTRY or total > n - pos:
            return table, count, _BAD_TOTAL, pos, named, name
        end = pos + total
        body_at = pos + 20
        body_len = read_i32(u8, pos + 16)
        if body_len < 0 or body_len > end - body_at - 2:
            return table, count, _BAD_BODY, pos, named, name
        props_len_at = body_at + body_len
        props_len = (np.int64(u8[props_len_at]) << 8) | u8[props_len_at + 1]
        if props_len >= 0x8000 or props_len_at + 2 + props_len != end:  # a Java short: < 0 is bad
            return table, count, _BAD_PROPERTIES, pos, named, name
        table[0, count] = read_i32(u8, pos + 12)
        table[1, count] = body_at
        table[2, count] = body_len
        table[3, count] = props_len_at + 2
        table[4, count] = props_len
        if named < 0 and n_names > 0:
            q = props_len_at + 2
            while q < end and named < 0:
                sep, stop = property_entry(u8, q, end)
                if q < sep < stop - 1:
                    for j in range(n_names):
                        if is_name(u8, q, sep - q, names, name_offsets, j):
                            named = count
                            name = j
                            break
                q = stop + 1
        count += 1
        pos = end
    return table, count, 0, pos, named, name


def decode_batch(data: bytes | bytearray | memoryview) -> list[BatchEntry]:
    """The inner messages of a batch body (properties strings decoded as UTF-8)."""
    buf = bytes(data)
    spans = scan_batch(buf)
    out = []
    for i, (flag, b, blen, p, plen) in enumerate(
        zip(
            spans.flags.tolist(),
            spans.body_at.tolist(),
            spans.body_lengths.tolist(),
            spans.properties_at.tolist(),
            spans.properties_lengths.tolist(),
        )
    ):
        try:
            props = buf[p : p + plen].decode()
        except UnicodeDecodeError:
            raise CorruptDataError(f"batch message {i}: properties are not UTF-8", offset=p) from None
        out.append(BatchEntry(flag, buf[b : b + blen], props))
    return out


def encode_batch_body(entries: Sequence[BatchEntry]) -> bytes:
    """A batch body as the Java client writes it."""
    out = bytearray()
    for e in entries:
        props = e.properties.encode()
        total = _HEAD.size + len(e.body) + 2 + len(props)
        out += _HEAD.pack(total, 0, 0, e.flag, len(e.body))
        out += e.body
        out += _PROPS_LEN.pack(len(props))
        out += props
    return bytes(out)
