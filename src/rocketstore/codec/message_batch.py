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
from rocketstore.codec.commitlog_record import MAX_PROPERTIES_BYTES
from rocketstore.errors import CorruptDataError
from rocketstore.jit import kernel

__all__ = [
    "BatchEntry",
    "EncodedBatch",
    "EncodedColumns",
    "decode_batch",
    "encode_batch_body",
    "inner_message",
    "problem_text",
]

_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLENGTH
_PROPS_LEN = struct.Struct(">h")
_MIN_ENTRY: Final = _HEAD.size + 2


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
class EncodedColumns:
    """Many producers' batches as columns, for a caller that holds them as buffers rather than
    objects (a broker's sends of one turn; a single message is a batch of one). Batch ``b`` is
    ``data[data_offsets[b] : data_offsets[b + 1]]`` in the batch encoding, to topic
    ``topics[topic_ids[b]]``, queue ``queue_ids[b]``, born at ``born_hosts[born_host_ids[b]]``
    (``host:port``) at ``born_timestamps[b]``, with ``sys_flags[b]`` (the body's bits) and
    ``reconsume_times[b]``; ``properties[properties_offsets[b] : properties_offsets[b + 1]]``
    is a properties string added to each of its messages (may be empty). Per-batch columns are
    int64 arrays of one length; the offsets one longer."""

    data: npt.NDArray[np.uint8]
    data_offsets: npt.NDArray[np.int64]
    topics: Sequence[str]
    topic_ids: npt.NDArray[np.int64]
    queue_ids: npt.NDArray[np.int64]
    born_hosts: Sequence[str]
    born_host_ids: npt.NDArray[np.int64]
    born_timestamps: npt.NDArray[np.int64]
    sys_flags: npt.NDArray[np.int64]
    reconsume_times: npt.NDArray[np.int64]
    properties: npt.NDArray[np.uint8]
    properties_offsets: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.topic_ids)

    @classmethod
    def of(cls, batches: Sequence[EncodedBatch], properties: Sequence[bytes] = ()) -> EncodedColumns:
        """``batches`` as columns, with ``properties[b]`` (an encoded properties string) added to
        the messages of batch ``b`` (nothing added when ``properties`` is empty). Nothing is
        checked here: the store's put checks every column."""
        nb = len(batches)
        topic_index: dict[str, int] = {}
        host_index: dict[str, int] = {}
        fields = np.empty((6, nb), dtype=np.int64)  # topic, queue, sysflag, born time, reconsume, host
        for b, batch in enumerate(batches):
            t = topic_index.setdefault(batch.topic, len(topic_index))
            h = host_index.setdefault(batch.born_host, len(host_index))
            fields[:, b] = (t, batch.queue_id, batch.sys_flag, batch.born_timestamp, batch.reconsume_times, h)
        datas = [batch.data for batch in batches]
        extras = list(properties) if properties else [b""] * nb
        return cls(
            _joined(datas), _starts(datas), list(topic_index), fields[0], fields[1], list(host_index),
            fields[5], fields[3], fields[2], fields[4], _joined(extras), _starts(extras),
        )  # fmt: skip


def _joined(parts: list[bytes]) -> npt.NDArray[np.uint8]:
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def _starts(parts: list[bytes]) -> npt.NDArray[np.int64]:
    """Where each of ``parts`` starts once joined, and the end."""
    out = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)), out=out[1:])
    return out


@dataclass(slots=True)
class BatchEntry:
    flag: int
    body: bytes
    properties: str


_CUT_SHORT, _BAD_TOTAL, _BAD_BODY, _BAD_PROPERTIES = 1, 2, 3, 4  # inner_message's problem codes


@kernel(cache=True, nogil=True, inline="always")
def inner_message(u8: npt.NDArray[np.uint8], pos: int, end: int) -> tuple[int, int, int, int, int, int]:
    """The inner message at ``u8[pos:end]`` (``pos < end``): (a problem code, 0 when none; its
    TOTALSIZE, FLAG, body length, properties start and length). Its body starts at ``pos + 20``."""
    if end - pos < _MIN_ENTRY:
        return _CUT_SHORT, 0, 0, 0, 0, 0
    total = read_i32(u8, pos)
    if total < _MIN_ENTRY or total > end - pos:
        return _BAD_TOTAL, 0, 0, 0, 0, 0
    stop = pos + total
    body_len = read_i32(u8, pos + 16)
    if body_len < 0 or body_len > total - _MIN_ENTRY:
        return _BAD_BODY, 0, 0, 0, 0, 0
    props_len_at = pos + 20 + body_len
    props_len = (np.int64(u8[props_len_at]) << 8) | u8[props_len_at + 1]
    if props_len >= 0x8000 or props_len_at + 2 + props_len != stop:  # a Java short: < 0 is bad
        return _BAD_PROPERTIES, 0, 0, 0, 0, 0
    return 0, total, read_i32(u8, pos + 12), body_len, props_len_at + 2, props_len


def problem_text(data: bytes | bytearray | memoryview, problem: int, pos: int) -> str:
    """What is wrong with the inner message at ``pos`` (``inner_message``'s problem code)."""
    if problem == _CUT_SHORT:
        return "is cut short"
    if problem == _BAD_TOTAL:
        return f"TOTALSIZE {_HEAD.unpack_from(data, pos)[0]} outside {_MIN_ENTRY}..{len(data) - pos}"
    body_len = _HEAD.unpack_from(data, pos)[4]
    if problem == _BAD_BODY:
        return f"body length {body_len} exceeds it"
    props_len = _PROPS_LEN.unpack_from(data, pos + _HEAD.size + body_len)[0]
    return f"properties length {props_len} does not end at TOTALSIZE"


def decode_batch(data: bytes | bytearray | memoryview) -> list[BatchEntry]:
    """The inner messages of a batch body (properties strings decoded as UTF-8), every length
    checked (``CorruptDataError`` names the first bad one)."""
    buf = bytes(data)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    out: list[BatchEntry] = []
    pos = 0
    while pos < len(buf):
        problem, total, flag, body_len, props_at, props_len = inner_message(u8, pos, len(buf))
        if problem:
            why = problem_text(buf, problem, pos)
            raise CorruptDataError(f"batch message {len(out)} at byte {pos}: {why}", offset=pos)
        try:
            props = buf[props_at : props_at + props_len].decode()
        except UnicodeDecodeError:
            raise CorruptDataError(
                f"batch message {len(out)}: properties are not UTF-8", offset=pos
            ) from None
        out.append(BatchEntry(flag, buf[pos + 20 : pos + 20 + body_len], props))
        pos += total
    return out


def encode_batch_body(entries: Sequence[BatchEntry]) -> bytes:
    """A batch body as the Java client writes it. ValueError for properties longer than an
    entry's length field (a Java short) holds."""
    out = bytearray()
    for i, e in enumerate(entries):
        props = e.properties.encode()
        if len(props) > MAX_PROPERTIES_BYTES:
            raise ValueError(
                f"message {i}: properties of {len(props)} bytes, more than {MAX_PROPERTIES_BYTES}"
            )
        total = _HEAD.size + len(e.body) + 2 + len(props)
        out += _HEAD.pack(total, 0, 0, e.flag, len(e.body))
        out += e.body
        out += _PROPS_LEN.pack(len(props))
        out += props
    return bytes(out)
