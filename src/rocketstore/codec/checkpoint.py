"""The checkpoint file layout (4096 bytes; the rest is zero)::

0   8  physicMsgTimestamp   store time of the last commitlog record known flushed
8   8  logicsMsgTimestamp   store time of the last record whose consume-queue entry is flushed
16  8  indexMsgTimestamp    store time of the last record whose index entries are flushed
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from rocketstore.errors import CorruptDataError

__all__ = ["CHECKPOINT_FILE_SIZE", "Checkpoint", "decode_checkpoint", "encode_checkpoint"]

CHECKPOINT_FILE_SIZE: Final = 4096
_LAYOUT = struct.Struct(">qqq")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0


def encode_checkpoint(cp: Checkpoint) -> bytes:
    """The whole 4096-byte file."""
    head = _LAYOUT.pack(cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp)
    return head + bytes(CHECKPOINT_FILE_SIZE - len(head))


def decode_checkpoint(buf: bytes | bytearray | memoryview) -> Checkpoint:
    """The three timestamps; CorruptDataError when ``buf`` is too short to hold them."""
    if len(buf) < _LAYOUT.size:
        raise CorruptDataError(f"a checkpoint needs {_LAYOUT.size} bytes, got {len(buf)}", offset=0)
    return Checkpoint(*_LAYOUT.unpack_from(buf, 0))
