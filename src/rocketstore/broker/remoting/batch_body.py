"""The body of SEND_BATCH_MESSAGE (RocketMQ's ``MessageDecoder.encodeMessages``; REMOTING.md §3.4):
the only module that packs or unpacks it. Inner messages back to back::

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
from collections.abc import Sequence
from dataclasses import dataclass

from rocketstore.errors import CorruptDataError

__all__ = ["BatchEntry", "decode_batch", "encode_batch_body"]

_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLENGTH
_PROPS_LEN = struct.Struct(">h")


@dataclass(slots=True)
class BatchEntry:
    flag: int
    body: bytes
    properties: str


def decode_batch(data: bytes | bytearray | memoryview) -> list[BatchEntry]:
    """The inner messages of a batch body."""
    buf = data if type(data) is bytes else bytes(data)  # one copy; slices of bytes are one object
    n = len(buf)
    pos = 0
    out: list[BatchEntry] = []
    head, head_size, props_len_at = _HEAD.unpack_from, _HEAD.size, _PROPS_LEN.unpack_from
    while pos < n:
        if n - pos < head_size + 2:
            raise CorruptDataError(f"batch message {len(out)} at byte {pos} is cut short", offset=pos)
        total, _magic, _crc, flag, body_len = head(buf, pos)
        if total < head_size + 2 or total > n - pos:
            raise CorruptDataError(
                f"batch message {len(out)}: TOTALSIZE {total} outside {head_size + 2}..{n - pos}", offset=pos
            )
        end = pos + total
        body_start = pos + head_size
        if body_len < 0 or body_len > end - body_start - 2:
            raise CorruptDataError(f"batch message {len(out)}: body length {body_len} exceeds it", offset=pos)
        props_pos = body_start + body_len
        (props_len,) = props_len_at(buf, props_pos)
        if props_len < 0 or props_pos + 2 + props_len != end:
            raise CorruptDataError(
                f"batch message {len(out)}: properties length {props_len} does not end at TOTALSIZE",
                offset=pos,
            )
        try:
            props = buf[props_pos + 2 : end].decode()
        except UnicodeDecodeError:
            raise CorruptDataError(
                f"batch message {len(out)}: properties are not UTF-8", offset=pos
            ) from None
        out.append(BatchEntry(flag, buf[body_start:props_pos], props))
        pos = end
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
