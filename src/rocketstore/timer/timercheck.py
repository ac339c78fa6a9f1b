"""The timer checkpoint: ``{root}/config/timercheck``, RocketMQ 5's TimerCheckpoint (TIMER.md §5.3).

A 4096-byte file (the rest zero), big-endian longs::

    0   lastReadTimeMs          every slot before it is fully delivered
    8   lastTimerLogFlushPos    the timer log is durable up to here
    16  lastTimerQueueOffset    next rmq_sys_wheel_timer queue offset to enqueue
    24  masterTimerQueueOffset  the master's enqueue progress (= lastTimerQueueOffset here)
    32  dataVersion.stateVersion
    40  dataVersion.timestamp
    48  dataVersion.counter

Written only by ``TimerCheckpoint.flush``, after the timer log and the wheel were forced, so a
checkpoint never claims more than is durable. Replaced in place (one page; the 56 bytes are
written by one pwrite and forced).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from rocketstore.errors import CorruptDataError
from rocketstore.storage.paths import DEFAULT_FILE_MODE, open_store_file, read_store_file

__all__ = [
    "TIMERCHECK_FILE_SIZE",
    "TimerCheckpoint",
    "TimerProgress",
    "decode_timercheck",
    "encode_timercheck",
]

TIMERCHECK_FILE_SIZE: Final = 4096
LAYOUT: Final = struct.Struct(">7q")
assert LAYOUT.size == 56


@dataclass(frozen=True, slots=True)
class TimerProgress:
    last_read_time_ms: int = 0
    last_timer_log_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    timestamp: int = 0
    counter: int = 0


def encode_timercheck(progress: TimerProgress) -> bytes:
    """The whole 4096-byte file."""
    head = LAYOUT.pack(
        progress.last_read_time_ms,
        progress.last_timer_log_flush_pos,
        progress.last_timer_queue_offset,
        progress.master_timer_queue_offset,
        progress.state_version,
        progress.timestamp,
        progress.counter,
    )
    return head + bytes(TIMERCHECK_FILE_SIZE - len(head))


def decode_timercheck(buf: bytes | bytearray | memoryview, path: str | None = None) -> TimerProgress:
    if len(buf) < LAYOUT.size:
        raise CorruptDataError(f"a timercheck needs {LAYOUT.size} bytes, got {len(buf)}", path=path, offset=0)
    return TimerProgress(*LAYOUT.unpack_from(buf, 0))


class TimerCheckpoint:
    """``config/timercheck``: ``value`` as last loaded or flushed."""

    def __init__(self, path: Path, *, readonly: bool = False, mode: int = DEFAULT_FILE_MODE) -> None:
        self.path = path
        self.readonly = readonly
        self.mode = mode
        self.value = TimerProgress()

    def load(self) -> TimerProgress:
        data = read_store_file(self.path)
        if data is not None:
            self.value = decode_timercheck(data, str(self.path))
        return self.value

    def flush(self, progress: TimerProgress) -> None:
        """Write ``progress`` (its counter moved on) and force it to disk. Raises OSError."""
        progress = replace(progress, counter=self.value.counter + 1)
        fd = open_store_file(self.path, writable=True, create_mode=self.mode)
        try:
            data = encode_timercheck(progress)
            if os.pwrite(fd, data, 0) != len(data):
                raise OSError(f"short write to {self.path}")
            os.fsync(fd)
        finally:
            os.close(fd)
        self.value = progress
