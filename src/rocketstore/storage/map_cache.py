"""MapCache: a bound on how many consume-queue and index files a store keeps mapped at once."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

__all__ = ["MapCache", "Parkable"]


class Parkable(Protocol):
    """A file that can give up its mapping and take it back when next read (``MappedFile``)."""

    referenced: bool

    def park(self) -> bool:
        """Flush and unmap; False (still mapped) while a reader holds a view of it. Raises the
        flush's OSError."""
        ...


class MapCache:
    """The mapped files of one store that may be parked, at most ``capacity`` of them.

    A store with tens of thousands of queues cannot map every queue file: each mapping costs a
    VMA (``vm.max_map_count`` is 65530 by default) and, on Python before 3.13, a descriptor
    (the mmap module keeps a duplicate of the file's), so ``ulimit -n 1024`` would be reached
    after about a thousand. Files are mapped when first read and ``admit``-ted here; when more
    than ``capacity`` are mapped, the least recently used are parked (flushed, then unmapped).

    Recency is approximated by the second-chance (CLOCK) rule, so that a read of a file that is
    already mapped costs nothing here: readers set ``referenced`` on the file, and a referenced
    file at the old end of the order has the flag cleared and moves to the new end instead of
    being parked. A file a reader still holds a view of refuses to park and stays mapped (it is
    re-queued): the count can exceed ``capacity`` by the files in use at that moment, never a
    reader's memory under it.

    Thread safety: any thread may admit (whoever maps a file) and discard; the order is
    guarded by one lock, and victims are parked outside it, so a slow flush does not hold up
    other threads' admissions, and the lock is never taken while a file's own map lock is held.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a map cache holds at least one file, not {capacity}")
        self.capacity = capacity
        self._order: OrderedDict[Parkable, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._order)

    def admit(self, mf: Parkable) -> None:
        """``mf`` was just mapped: count it, and park the least recently used files beyond the
        capacity. Raises OSError when parking one failed to flush it (that file stays mapped)."""
        mf.referenced = True
        with self._lock:
            self._order[mf] = None
            self._order.move_to_end(mf)
            victims = self._choose_victims()
        self._park(victims)

    def discard(self, mf: Parkable) -> None:
        """``mf`` is closed or deleted: no longer counted."""
        with self._lock:
            self._order.pop(mf, None)

    def _choose_victims(self) -> list[Parkable]:
        victims: list[Parkable] = []
        excess = len(self._order) - self.capacity
        # each file is looked at most twice: once to clear its flag, once to be taken
        budget = 2 * len(self._order)
        while excess > 0 and budget > 0:
            budget -= 1
            mf = next(iter(self._order))
            if mf.referenced:
                mf.referenced = False
                self._order.move_to_end(mf)
                continue
            del self._order[mf]
            victims.append(mf)
            excess -= 1
        return victims

    def _park(self, victims: list[Parkable]) -> None:
        busy: list[Parkable] = []
        try:
            for i, mf in enumerate(victims):
                try:
                    parked = mf.park()
                except BaseException:
                    busy.extend(victims[i:])
                    raise
                if not parked:
                    busy.append(mf)
        finally:
            if busy:
                with self._lock:
                    for mf in busy:
                        self._order[mf] = None
