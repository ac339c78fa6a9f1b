"""AllocateService: creates the next commitlog segment before it is needed.

When the log rolls to segment N, the service is asked for N+1 and creates it in the
background, so the next roll finds a ready file instead of stalling a put on file creation
(and, with ``warm_mapped_file_enable``, on faulting its pages in).
Pre-created segments that were never used are deleted at a clean stop; after a crash such a
segment is an all-zero file that recovery removes.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from rocketstore.service import BackgroundService
from rocketstore.storage.mapped_file import MappedFile
from rocketstore.storage.paths import DEFAULT_FILE_MODE, segment_name
from rocketstore.storage.transient_pool import TransientStorePool

__all__ = ["AllocateService"]

log = logging.getLogger(__name__)


class AllocateService(BackgroundService):
    """Thread safety: creation happens under one lock, so a file is never created twice."""

    def __init__(
        self,
        pool: TransientStorePool | None = None,
        *,
        warm: bool = False,
        file_mode: int = DEFAULT_FILE_MODE,
    ) -> None:
        super().__init__("allocate", interval=3600.0)
        self._file_mode = file_mode
        self._pool = pool
        self._warm = warm
        self._lock = threading.Lock()
        self._ready: dict[Path, MappedFile] = {}
        self._wanted: list[tuple[Path, int]] = []

    def allocate(self, path: Path, size: int) -> MappedFile:
        """The segment at ``path``: pre-created if ready, else created now. Queues the next one."""
        with self._lock:
            mf = self._ready.pop(path, None)
            if mf is None:
                mf = self._create(path, size)
            self._wanted.append((path.with_name(segment_name(mf.from_offset + size)), size))
        if self.running:
            self.wakeup()
        else:
            self._wanted.clear()
        return mf

    def _create(self, path: Path, size: int) -> MappedFile:
        pool = self._pool
        if pool is None:
            mf = MappedFile(path, size, create=True, mode=self._file_mode)
        else:
            mf = MappedFile(
                path,
                size,
                create=True,
                write_buffer=pool.borrow(),
                on_buffer_free=pool.give_back,
                mode=self._file_mode,
            )
        if self._warm:
            mf.warm()
        return mf

    def run_once(self) -> None:
        while True:
            with self._lock:
                if not self._wanted:
                    return
                path, size = self._wanted.pop(0)
                if path in self._ready or os.path.lexists(path):
                    continue
                try:
                    self._ready[path] = self._create(path, size)
                except OSError as exc:
                    # Only an optimisation failed: the put that needs this segment creates it
                    # itself and reports the error in its status if it persists.
                    log.warning("could not pre-allocate %s: %s", path, exc)

    def stop(self, timeout: float | None = 30.0) -> None:
        with self._lock:
            self._wanted.clear()
        super().stop(timeout)
        with self._lock:
            for mf in self._ready.values():
                mf.destroy()
            self._ready.clear()
