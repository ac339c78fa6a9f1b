"""WarmAheadService: keeps the pages just ahead of the commitlog's write position faulted in.

A put copies its records into the newest segment. Into pages never touched, that costs the
putting thread a page fault per page, or, as a pwrite, the kernel's allocation of each page:
about 100 us for a broker round of 330 KiB, and much more while the flusher writes the file
back. Into pages already faulted in it is a copy into memory, about 28 us. This service faults
them in (``MappedFile.populate``: MADV_POPULATE_WRITE, nothing in the file changes) on its own
thread, without the GIL, ``AHEAD`` bytes ahead of the writer, so the putting thread (a broker's
event loop) only copies.

Under ASYNC_FLUSH with timed flushes only (``flush_commit_log_timed``, the default): a flush
writes back every dirty page of the file, the warmed zeros ahead of the writer too, which then
fault again when written. The flusher there runs every ``flush_interval`` (500 ms), so that is
a few MiB a flush; a store that flushes as puts come (SYNC_FLUSH, or a flusher woken by the
puts) would fault nearly every page twice, for twice the writes to the disk.

Where the OS cannot (Linux before 5.14, another OS), the first round says so in the log and
the writes stay pwrites, as without the service.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from typing import Final

from rocketstore.service import BackgroundService
from rocketstore.storage.mapped_file_queue import MappedFileQueue

__all__ = ["WarmAheadService"]

log = logging.getLogger(__name__)

AHEAD: Final = 4 << 20  # bytes kept faulted in ahead of the write position
_STEP: Final = 1 << 20  # faulted in by one call (the file's map lock is held for it: ~0.3 ms)


class WarmAheadService(BackgroundService):
    """Thread safety: ``nudge`` is called by the putting threads; the rest runs on the service's."""

    def __init__(
        self,
        files: MappedFileQueue,
        on_failure: Callable[[BackgroundService, BaseException], None] | None = None,
    ) -> None:
        super().__init__("warm-ahead", interval=1.0, on_failure=on_failure)
        self._files = files
        self.supported = True

    def nudge(self) -> None:
        """After an append: wake the service once less than half of ``AHEAD`` is warm."""
        mf = self._files.last
        if (
            mf is not None
            and self.supported
            and mf.populated_end < mf.size
            and mf.populated_end - mf.wrote_position < AHEAD // 2
        ):
            self.wakeup()

    def run_once(self) -> None:
        mf = self._files.last
        if mf is None or not self.supported:
            return
        wrote = mf.wrote_position
        target = min(mf.size, wrote + AHEAD)
        start = max(mf.populated_end, wrote)
        while start < target and not self._stopping.is_set():
            end = min(target, start + _STEP)
            failed = mf.populate(start, end)
            if failed == errno.EINVAL:
                self.supported = False
                log.info("the OS cannot fault pages in ahead (MADV_POPULATE_WRITE): puts write with pwrite")
                return
            if failed:  # parked, closed or cut short under the store: the writer finds out which
                log.debug("%s: pages not faulted in ahead: %s", mf.path, os.strerror(failed))
                return
            start = end
