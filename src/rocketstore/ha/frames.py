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


# A receive buffer: a frame of the largest body fits, with room for the next reads.
_CAPACITY = 8 * 1024 * 1024
_MIN_FREE = 64 * 1024  # the least a receive is offered


class FrameReader:
    """Splits the master's byte stream into frames. Bytes arrive with ``feed``, or straight from
    the socket into ``space()`` followed by ``received(n)`` (no copy); ``header`` is the pending
    frame's (offset, size) as soon as its 12 bytes are in (the slave checks the offset before the
    body arrives); ``take`` returns a whole frame's body when complete.

    A body is a view of the receive buffer, not a copy. It stays valid: bytes are only ever
    written past what was received, and a full buffer is replaced (the rest copied into a new
    one), never reused.
    """

    def __init__(self, capacity: int = _CAPACITY) -> None:
        self._capacity = capacity
        self._buf = memoryview(bytearray(capacity))
        self._start = 0  # the first byte not yet taken
        self._end = 0  # the end of what was received
        self.header: tuple[int, int] | None = None

    def space(self) -> memoryview:
        """Where the next bytes received go (at least 64 KiB, and the rest of the pending frame
        if it is larger); pass the count to ``received``."""
        pending = self._end - self._start
        frame = HEADER_SIZE + (self.header[1] if self.header is not None else 0)
        wanted = max(_MIN_FREE, frame - pending)
        if len(self._buf) - self._end < wanted:
            fresh = memoryview(bytearray(max(self._capacity, 2 * (pending + wanted))))
            fresh[:pending] = self._buf[self._start : self._end]
            self._buf, self._start, self._end = fresh, 0, pending
        return self._buf[self._end :]

    def received(self, n: int) -> None:
        """``n`` bytes were written at the start of ``space()``."""
        self._end += n
        self._parse_header()

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            space = self.space()
            n = min(len(space), len(view))
            space[:n] = view[:n]
            self.received(n)
            view = view[n:]

    def _parse_header(self) -> None:
        if self.header is None and self._end - self._start >= HEADER_SIZE:
            offset, size = HEADER.unpack_from(self._buf, self._start)
            if size < 0 or size > MAX_BODY:
                raise ValueError(f"frame at offset {offset} declares a body of {size} bytes")
            self.header = (int(offset), int(size))

    def take(self) -> tuple[int, memoryview] | None:
        """The next complete frame (offset, body), or None until its last byte has arrived."""
        if self.header is None:
            return None
        offset, size = self.header
        body_at = self._start + HEADER_SIZE
        if self._end < body_at + size:
            return None
        self._start = body_at + size
        self.header = None
        self._parse_header()
        return offset, self._buf[body_at : body_at + size]
