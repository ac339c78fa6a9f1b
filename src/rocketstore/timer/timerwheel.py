"""The time wheel: ``{root}/timerwheel``, RocketMQ 5's TimerWheel (TIMER.md §5.1).

``slots_total * 2`` slots of 32 bytes (38,707,200 bytes with RocketMQ's fixed 604,800), slot
*i* at byte ``i * 32``, ``index(t) = (t // precision) % (slots_total * 2)``. Slot layout,
big-endian::

    0   long  time      slot time in precision units (t // precision)
    8   long  firstPos  timer log offset of the slot's first unit
    16  long  lastPos   timer log offset of its last unit (the head of the backward chain)
    24  int   num       timers in the slot (+1 per enqueue of a timer; a delete unit adds 0)
    28  int   magic     unused, written back as read

A slot counts for time *t* only when its stored time is ``t // precision``; a slot of an
earlier lap reads as empty and needs no clearing. The file is created zero-filled (sparse)
and must be exactly the expected length.

RocketMQ counts a delete unit -1 in ``num``; here it counts 0, so a slot's ``num`` is the
timers it holds, never negative (RocketMQ reads ``num`` only for its flow control, which
is off by default). A slot is non-empty by its ``firstPos`` alone: one timer and one cancel
leave RocketMQ's ``num`` at 0 with a timer still to deliver.

Unlike RocketMQ, which keeps a heap copy and copies changed bytes into the mapping at each
flush, the mapping itself is written: a process crash loses nothing written, and ``flush``
forces it to disk. Nothing else packs or unpacks these bytes. Thread safety: one writer (the
timer service); ``pending_slots`` readers may see a slot mid-update.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt

from rocketstore.errors import CorruptDataError
from rocketstore.storage.paths import DEFAULT_FILE_MODE, open_store_file, store_file_exists, store_file_size

__all__ = ["SLOTS_TOTAL", "SLOT_SIZE", "Slot", "TimerWheel"]

SLOT: Final = struct.Struct(">qqqii")
SLOT_SIZE: Final = 32
assert SLOT.size == SLOT_SIZE
SLOT_DTYPE: Final = np.dtype(
    [("time", ">i8"), ("first_pos", ">i8"), ("last_pos", ">i8"), ("num", ">i4"), ("magic", ">i4")]
)
assert SLOT_DTYPE.itemsize == SLOT_SIZE
SLOTS_TOTAL: Final = 7 * 86400  # RocketMQ's TIMER_WHEEL_TTL_DAY * DAY_SECS, whatever the precision


class Slot(NamedTuple):
    time_ms: int  # -1 for an empty slot
    first_pos: int
    last_pos: int
    num: int
    magic: int

    @property
    def empty(self) -> bool:
        return self.first_pos < 0


EMPTY_SLOT: Final = Slot(-1, -1, -1, 0, 0)


class TimerWheel:
    """The wheel file at ``path`` for slots of ``precision_ms``."""

    def __init__(
        self,
        path: Path,
        precision_ms: int,
        *,
        slots_total: int = SLOTS_TOTAL,
        readonly: bool = False,
        file_mode: int = DEFAULT_FILE_MODE,
    ) -> None:
        self.path = path
        self.precision_ms = precision_ms
        self.slot_count = slots_total * 2
        self.size = self.slot_count * SLOT_SIZE
        self.readonly = readonly
        exists = store_file_exists(path)
        if exists and (actual := store_file_size(path)) != self.size:
            raise CorruptDataError(f"timer wheel length {actual} != expected {self.size}", path=str(path))
        if not exists and readonly:
            self._mm: mmap.mmap | None = None
            self.slots: npt.NDArray[np.void] = np.zeros(0, dtype=SLOT_DTYPE)
            return
        fd = open_store_file(path, writable=not readonly, create_mode=None if exists else file_mode)
        try:
            if not exists:
                os.ftruncate(fd, self.size)
            self._mm = mmap.mmap(fd, self.size, access=mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd  # kept for flush: fdatasync lets other threads run, mmap.flush holds the GIL
        self.slots = np.frombuffer(self._mm, dtype=SLOT_DTYPE)  # a view: no copy of 38 MB

    def _index(self, time_ms: int) -> int:
        return (time_ms // self.precision_ms) % self.slot_count

    def slot(self, time_ms: int) -> Slot:
        """The slot for ``time_ms`` (a multiple of the precision), empty when it holds another lap."""
        if self._mm is None:
            return EMPTY_SLOT
        units, first, last, num, magic = SLOT.unpack_from(self._mm, self._index(time_ms) * SLOT_SIZE)
        if units != time_ms // self.precision_ms:
            return EMPTY_SLOT
        return Slot(units * self.precision_ms, first, last, num, magic)

    def put_slot(self, time_ms: int, first_pos: int, last_pos: int, num: int, magic: int = 0) -> None:
        assert self._mm is not None and not self.readonly
        SLOT.pack_into(
            self._mm,
            self._index(time_ms) * SLOT_SIZE,
            time_ms // self.precision_ms,
            first_pos,
            last_pos,
            num,
            magic,
        )

    def due_times(self, from_ms: int, to_ms: int) -> list[int]:
        """Times (ms) of the non-empty slots in ``[from_ms, to_ms)``, in order: one pass over the
        whole wheel, for catching up after the store was closed for a long time."""
        lo, hi = from_ms // self.precision_ms, -(-to_ms // self.precision_ms)
        times = self.slots["time"]
        hit = (times >= lo) & (times < hi) & (self.slots["first_pos"] >= 0)
        return [int(t) * self.precision_ms for t in np.sort(times[hit])]

    def pending(self, from_ms: int) -> int:
        """Timers in the slots of time ``from_ms`` or later (a slot written by RocketMQ, whose
        delete units count -1, counts at least 0)."""
        if self._mm is None:
            return 0
        valid = (self.slots["time"] >= from_ms // self.precision_ms) & (self.slots["first_pos"] >= 0)
        return int(np.maximum(self.slots["num"][valid].astype(np.int64), 0).sum())

    def first_pos_pointing_past(self, end: int) -> int:
        """The lowest first unit offset of the slots whose chain reaches ``end`` or past it (-1
        if none): their units before ``end`` must be linked again once they are emptied."""
        if self._mm is None:
            return -1
        hit = (self.slots["last_pos"] >= end) & (self.slots["time"] != 0) & (self.slots["first_pos"] >= 0)
        firsts = self.slots["first_pos"][hit]
        return int(firsts.min()) if len(firsts) else -1

    def clear_pointing_past(self, end: int) -> int:
        """Empty every slot whose chain starts at or past timer log offset ``end`` (its units are
        gone: recovery links what remains again); how many."""
        assert self._mm is not None and not self.readonly
        slots = self.slots
        bad = np.flatnonzero((slots["last_pos"] >= end) & (slots["time"] != 0))
        for i in bad.tolist():
            SLOT.pack_into(self._mm, i * SLOT_SIZE, 0, -1, -1, 0, 0)
        return len(bad)

    def flush(self) -> None:
        """Force what was written through the mapping to disk. Raises OSError."""
        if self._mm is not None and not self.readonly:
            os.fdatasync(self._fd)

    def close(self) -> None:
        if self._mm is not None:
            del self.slots
            self.slots = np.zeros(0, dtype=SLOT_DTYPE)
            self._mm.close()
            self._mm = None
            os.close(self._fd)
