"""TransientStorePool: off-mapping write buffers for commitlog segments (RocketMQ's pool).

With ``transient_store_pool_enable``, appends go to a pooled buffer the size of a segment and
a committer copies them into the mapped file every ``commit_interval`` ms. Puts then never
touch the page cache under the append lock, at a price: bytes not yet committed exist only in
this process's memory, so a process crash loses acknowledged messages (up to one commit
interval of them). Readers and dispatch see only committed bytes.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["TransientStorePool"]


class TransientStorePool:
    """At most ``size`` buffers of ``buffer_size`` bytes, created on first use and reused.

    Thread-safe. When every buffer is lent, ``borrow`` returns None and the segment is written
    through its mapping directly, as RocketMQ does.
    """

    def __init__(self, size: int, buffer_size: int) -> None:
        self.size = size
        self.buffer_size = buffer_size
        self._free: list[bytearray] = []
        self._created = 0
        self._lock = threading.Lock()

    def borrow(self) -> bytearray | None:
        with self._lock:
            if self._free:
                return self._free.pop()
            if self._created < self.size:
                self._created += 1
                return bytearray(self.buffer_size)
        return None

    def give_back(self, buffer: bytearray) -> None:
        # zeroed so that stale bytes (the tail behind a BLANK record) never reach a file
        np.frombuffer(buffer, dtype=np.uint8).fill(0)
        with self._lock:
            self._free.append(buffer)

    @property
    def available(self) -> int:
        """Buffers that can still be lent (free or not yet created)."""
        with self._lock:
            return len(self._free) + self.size - self._created
