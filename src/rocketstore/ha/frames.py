"""The wire format of RocketMQ 4.9's HA (master/slave replication) protocol.

Plain TCP, no handshake, no version, no checksum. Integers are big-endian.

Slave -> master, a report (8 bytes)::

    +--------------------------+
    | max offset (int64)       |   the slave's commitlog end: appended, not necessarily flushed
    +--------------------------+

The first report of a connection is where the slave wants data from; every later one is an ack.

Master -> slave, a transfer (12-byte header, then ``size`` raw commitlog bytes)::

    +--------------------------+--------------+---------------------------+
    | offset (int64)           | size (int32) | size bytes from offset    |
    +--------------------------+--------------+---------------------------+

``size`` 0 is a heartbeat; its offset is the next offset the master will send. A body never
crosses a commitlog segment and is not aligned to records (a record may span frames).
"""

from __future__ import annotations

import struct

__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "MAX_BODY",
    "REPORT",
    "REPORT_SIZE",
    "FrameReader",
    "encode_header",
    "encode_report",
    "last_report",
]

REPORT = struct.Struct(">q")
REPORT_SIZE = 8
assert REPORT.size == REPORT_SIZE
HEADER = struct.Struct(">qi")
HEADER_SIZE = 12
assert HEADER.size == HEADER_SIZE
# The Java slave reads into a 4 MiB buffer: a larger frame never completes there.
MAX_BODY = 4 * 1024 * 1024 - HEADER_SIZE


def encode_report(offset: int) -> bytes:
    return REPORT.pack(offset)


def encode_header(offset: int, size: int) -> bytes:
    if not 0 <= size <= MAX_BODY:
        raise ValueError(f"frame body of {size} bytes is outside 0..{MAX_BODY}")
    return HEADER.pack(offset, size)


def last_report(buf: bytearray) -> int | None:
    """The last complete report in ``buf`` (consumed with everything before it), or None.
    Like RocketMQ's master, only the newest value of a read counts; a partial one waits."""
    whole = len(buf) - len(buf) % REPORT_SIZE
    if not whole:
        return None
    (value,) = REPORT.unpack_from(buf, whole - REPORT_SIZE)
    del buf[:whole]
    return int(value)


class FrameReader:
    """Splits the master's byte stream into frames. ``feed`` bytes as they arrive; ``header``
    is the pending frame's (offset, size) as soon as its 12 bytes are in (the slave checks the
    offset before the body arrives); ``take`` returns a whole frame's body when complete."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.header: tuple[int, int] | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data
        self._parse_header()

    def _parse_header(self) -> None:
        if self.header is None and len(self._buf) >= HEADER_SIZE:
            offset, size = HEADER.unpack_from(self._buf, 0)
            if size < 0 or size > MAX_BODY:
                raise ValueError(f"frame at offset {offset} declares a body of {size} bytes")
            self.header = (int(offset), int(size))

    def take(self) -> tuple[int, bytes] | None:
        """The next complete frame (offset, body), or None until its last byte has arrived."""
        if self.header is None:
            return None
        offset, size = self.header
        end = HEADER_SIZE + size
        if len(self._buf) < end:
            return None
        body = bytes(self._buf[HEADER_SIZE:end])
        del self._buf[:end]
        self.header = None
        self._parse_header()
        return offset, body
