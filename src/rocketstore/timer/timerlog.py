"""The timer log: ``{root}/timerlog/{20-digit offset}``, RocketMQ 5's TimerLog (TIMER.md §5.2).

An append-only log of 52-byte units, one per timer entering the wheel, in segments named by
their first byte's global offset (as the commitlog's). Unit layout, big-endian::

    0   int   size          52
    4   long  prevPos       the slot's lastPos before this unit (-1: first of the slot's lap)
    12  int   magic         1 default | 2 roll | 4 delete; valid iff (magic | 0xF) == 0xF
    16  long  writeTimeMs   the wheel's write clock at enqueue (a multiple of the precision)
    24  int   delay         slot time - writeTimeMs (so the slot time is field 16 + field 24)
    28  long  offsetPy      commitlog offset of the rmq_sys_wheel_timer record
    36  int   sizePy        its size
    40  int   topicHash     Java String.hashCode() of REAL_TOPIC (0 if none)
    44  long  reserved      0

A unit never straddles segments: when ``52 + 16`` bytes no longer fit, a 16-byte BLANK
(``int remaining, long 0, int 0xCBD43194``) ends the segment and the unit goes to the next.

A slot's units form a list linked backwards through ``prevPos``. Nothing else packs or
unpacks these bytes. Thread safety: one writer (the timer service); readers read below
``end``. Crash: units are written whole before the slot points at them; recovery
(``valid_end``) stops at the first unit that is not whole and truncates there.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Final, NamedTuple

import numpy as np

from rocketstore.errors import CorruptDataError
from rocketstore.storage.mapped_file_queue import MappedFileQueue
from rocketstore.storage.paths import DEFAULT_FILE_MODE, make_store_dir

__all__ = [
    "BLANK_MAGIC",
    "MAGIC_DEFAULT",
    "MAGIC_DELETE",
    "MAGIC_ROLL",
    "UNIT_SIZE",
    "TimerLog",
    "TimerUnit",
    "decode_unit",
    "encode_unit",
]

UNIT: Final = struct.Struct(">iqiqiqiiq")
UNIT_SIZE: Final = 52
assert UNIT.size == UNIT_SIZE
BLANK: Final = struct.Struct(">iqi")
BLANK_SIZE: Final = 16
assert BLANK.size == BLANK_SIZE
BLANK_MAGIC: Final = -875286124  # 0xCBD43194 as a Java int
MAGIC_DEFAULT: Final = 1
MAGIC_ROLL: Final = 2
MAGIC_DELETE: Final = 4
# the units of a segment as numpy reads them (recovery scans whole segments at once)
UNIT_DTYPE: Final = np.dtype(
    [
        ("size", ">i4"),
        ("prev_pos", ">i8"),
        ("magic", ">i4"),
        ("write_ms", ">i8"),
        ("delay", ">i4"),
        ("offset_py", ">i8"),
        ("size_py", ">i4"),
        ("topic_hash", ">i4"),
        ("reserved", ">i8"),
    ]
)
assert UNIT_DTYPE.itemsize == UNIT_SIZE


class TimerUnit(NamedTuple):
    prev_pos: int
    magic: int
    write_ms: int
    delay: int
    offset_py: int
    size_py: int
    topic_hash: int

    @property
    def slot_ms(self) -> int:
        return self.write_ms + self.delay


def encode_unit(unit: TimerUnit) -> bytes:
    return UNIT.pack(UNIT_SIZE, unit.prev_pos, unit.magic, unit.write_ms, unit.delay,
                     unit.offset_py, unit.size_py, unit.topic_hash, 0)  # fmt: skip


def decode_unit(buf: bytes | bytearray | memoryview, pos: int = 0) -> TimerUnit:
    """The unit at ``pos``; CorruptDataError when its size or magic is not a unit's."""
    size, prev, magic, write_ms, delay, offset_py, size_py, topic_hash, _ = UNIT.unpack_from(buf, pos)
    if size != UNIT_SIZE or (magic | 0xF) != 0xF or magic == 0:
        raise CorruptDataError(f"no timer log unit (size {size}, magic {magic})", offset=pos)
    return TimerUnit(prev, magic, write_ms, delay, offset_py, size_py, topic_hash)


class TimerLog:
    """The timer log's segments (``segment_size`` bytes each) under ``directory``."""

    def __init__(
        self,
        directory: Path,
        segment_size: int,
        *,
        readonly: bool = False,
        file_mode: int = DEFAULT_FILE_MODE,
    ) -> None:
        if segment_size < UNIT_SIZE + BLANK_SIZE:
            raise ValueError(f"a timer log segment must hold a unit and a blank, not {segment_size} bytes")
        self.directory = directory
        self.segment_size = segment_size
        self.readonly = readonly
        self.files = MappedFileQueue(directory, segment_size, readonly=readonly, file_mode=file_mode)

    def load(self, dir_mode: int) -> None:
        if not self.readonly:
            make_store_dir(self.directory, dir_mode)
        if self.directory.is_dir():
            self.files.load()

    @property
    def end(self) -> int:
        """Global offset just past the last unit (or blank)."""
        return self.files.max_offset

    def append(self, unit: TimerUnit) -> int:
        """Write ``unit`` at the end; its global offset."""
        files = self.files
        mf = files.last_for_append()
        if mf.free_space < UNIT_SIZE + BLANK_SIZE:
            mf.write_at(mf.wrote_position, BLANK.pack(mf.free_space, 0, BLANK_MAGIC))
            mf.wrote_position = mf.size
            mf = files.last_for_append()
        pos = mf.wrote_position
        mf.write_at(pos, encode_unit(unit))
        mf.wrote_position = pos + UNIT_SIZE
        return mf.from_offset + pos

    def unit_at(self, offset: int) -> TimerUnit:
        """The unit at global ``offset``; CorruptDataError when there is none."""
        mf = self.files.find(offset)
        pos = offset - mf.from_offset if mf is not None else -1
        if mf is None or pos + UNIT_SIZE > mf.wrote_position:
            raise CorruptDataError(f"timer log offset {offset} is past its end {self.end}", offset=offset)
        try:
            return decode_unit(mf.buf, pos)
        except CorruptDataError as exc:
            raise CorruptDataError(exc.reason, path=str(mf.path), offset=offset) from None

    def scan(self, start: int) -> tuple[list[tuple[int, np.ndarray]], int]:
        """The whole units from unit offset ``start`` to the first that is not whole: a list of
        (global offset of the first unit, the units as a ``UNIT_DTYPE`` array), one per segment,
        and the offset past the last one (RocketMQ's processOffset). A BLANK closes a segment and
        the next one goes on; anything else that is not a unit ends the log."""
        found: list[tuple[int, np.ndarray]] = []
        end = start
        for mf in self.files.files:
            if mf.from_offset + mf.size <= start:
                continue
            if mf.from_offset > end:
                break  # the previous segment ended in something other than a blank
            pos = max(0, start - mf.from_offset)
            written = min(mf.wrote_position, mf.size)
            count = max(0, written - pos) // UNIT_SIZE
            units = np.frombuffer(mf.buf[pos : pos + count * UNIT_SIZE].tobytes(), dtype=UNIT_DTYPE)
            magic = units["magic"]
            good = (units["size"] == UNIT_SIZE) & ((magic | 0xF) == 0xF) & (magic != 0)
            bad = np.flatnonzero(~good)
            n = int(bad[0]) if len(bad) else len(units)
            found.append((mf.from_offset + pos, units[:n]))
            tail = pos + n * UNIT_SIZE
            end = mf.from_offset + tail
            if tail + BLANK_SIZE <= mf.size:
                remaining, _, blank_magic = BLANK.unpack_from(mf.buf, tail)
                if blank_magic == BLANK_MAGIC and remaining == mf.size - tail:
                    end = mf.from_offset + mf.size
                    continue
            break
        return found, end

    def truncate(self, offset: int) -> int:
        return self.files.truncate(offset)

    def flush(self) -> None:
        self.files.flush()

    def close(self) -> None:
        self.files.close()
