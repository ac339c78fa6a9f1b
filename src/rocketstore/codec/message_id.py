"""Message ids.

offsetMsgId (assigned by the store)::

    store host address (4 or 16 bytes) | port (int) | physical offset (long)

as upper-case hex: 32 characters for IPv4, 56 for IPv6. Decoding it gives the commitlog offset.

UNIQ_KEY (the client id, property ``UNIQ_KEY``), 16 bytes as 32 upper-case hex characters::

    IPv4 address (4) | pid (2) | random (4) | sequence (6)

RocketMQ's producer fills the last 6 bytes with ms-since-start-of-month (4) and a 16-bit
counter (2). Here the 48 bits are one counter seeded from that same clock value shifted
left 16, so ids stay unique however fast they are made (the 16-bit counter cannot wrap
inside a millisecond and repeat itself).
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
import socket
import struct
import threading
import time

import numpy as np
import numpy.typing as npt

from rocketstore.codec.text_column import TextColumn
from rocketstore.errors import CorruptDataError
from rocketstore.jit import kernel

__all__ = ["UniqKeyGenerator", "decode_offset_msg_id", "encode_offset_msg_id"]

_OFFSET = struct.Struct(">iq")
_HEX = re.compile(r"[0-9A-Fa-f]+")
_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


def encode_offset_msg_id(store_addr: bytes, store_port: int, physical_offset: int) -> str:
    return (store_addr + _OFFSET.pack(store_port, physical_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[bytes, int, int]:
    """offsetMsgId -> (address bytes, port, physical offset). Raises CorruptDataError."""
    if len(msg_id) not in (32, 56):
        raise CorruptDataError(f"an offsetMsgId has 32 or 56 hex digits, not {len(msg_id)}: {msg_id!r}")
    if not _HEX.fullmatch(msg_id):
        raise CorruptDataError(f"offsetMsgId is not hexadecimal: {msg_id!r}")
    raw = bytes.fromhex(msg_id)
    addr_len = len(raw) - 12
    port, offset = _OFFSET.unpack_from(raw, addr_len)
    if offset < 0:
        raise CorruptDataError(f"offsetMsgId encodes a negative offset: {msg_id!r}")
    return raw[:addr_len], port, offset


def _local_ipv4() -> bytes:
    try:
        addr = socket.gethostbyname(socket.gethostname())
        return socket.inet_aton(addr)
    except OSError:
        return bytes((127, 0, 0, 1))


def _ms_since_month_start() -> int:
    now = time.time()
    t = time.gmtime(now)
    start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
    return int((now - start) * 1000) & 0xFFFFFFFF


class UniqKeyGenerator:
    """Makes UNIQ_KEY values. Thread-safe; ``take_column(n)`` reserves n consecutive ids at once."""

    def __init__(self) -> None:
        prefix = _local_ipv4() + struct.pack(">H", os.getpid() & 0xFFFF) + secrets.token_bytes(4)
        self._prefix = prefix.hex().upper()
        self._prefix_u8 = np.frombuffer(self._prefix.encode(), dtype=np.uint8)
        self._counter = itertools.count(_ms_since_month_start() << 16)
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            value = next(self._counter)
        return f"{self._prefix}{value & 0xFFFFFFFFFFFF:012X}"

    def take_column(self, n: int) -> TextColumn:
        """n consecutive ids reserved at once, as one buffer written by a compiled loop."""
        first = self._reserve(n)
        return TextColumn(
            _uniq_keys(self._prefix_u8, first, n).tobytes(), np.arange(0, 32 * (n + 1), 32, dtype=np.int64)
        )

    def _reserve(self, n: int) -> int:
        with self._lock:
            first = next(self._counter)
            self._counter = itertools.count(first + n)
        return first


@kernel(cache=True)
def _uniq_keys(prefix: npt.NDArray[np.uint8], first: int, n: int) -> npt.NDArray[np.uint8]:
    out = np.empty(n * 32, dtype=np.uint8)
    for i in range(n):
        at = i * 32
        out[at : at + 20] = prefix
        value = (first + i) & 0xFFFFFFFFFFFF
        for d in range(12):
            out[at + 31 - d] = _HEX_DIGITS[(value >> (4 * d)) & 0xF]
    return out
