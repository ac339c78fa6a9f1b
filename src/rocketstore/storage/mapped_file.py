"""MappedFile: one fixed-size segment file, memory-mapped."""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
from pathlib import Path

from rocketstore.errors import StoreConfigError
from rocketstore.storage.paths import fsync_directory, offset_from_name

__all__ = ["OS_PAGE_SIZE", "MappedFile"]

OS_PAGE_SIZE = 4096
log = logging.getLogger(__name__)


def _reserve(fd: int, size: int) -> None:
    """Reserve the blocks now, so a full disk fails here with ENOSPC instead of a SIGBUS on write."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise


class MappedFile:
    """One segment: a file of exactly ``size`` bytes named by the global offset of its first byte.

    Positions, in bytes from the start of the file:

    - ``wrote_position``: end of the appended data; readers see only bytes below it.
    - ``flushed_position``: bytes below it are known to be on disk.

    Thread safety: a single writer (whoever holds the owning log's append lock) appends and
    moves ``wrote_position`` after the bytes are in place; readers read below it without locks.
    ``hold()``/``release()`` count readers that need the mapping for longer than a call; the
    mapping itself cannot be closed while a ``memoryview`` of it is alive (Python refuses), so
    a destroyed segment stays readable for whoever still holds a view of it.

    Crash behaviour: a new segment is created under a temporary name, sized, then renamed, so
    a crash never leaves a segment of the wrong size.
    """

    def __init__(
        self,
        path: Path,
        size: int,
        *,
        create: bool = False,
        readonly: bool = False,
        named_by_offset: bool = True,
    ) -> None:
        self.path = path
        self.size = size
        self.from_offset = offset_from_name(path.name) if named_by_offset else 0
        self.readonly = readonly
        if create:
            tmp = path.with_name(path.name + ".creating")
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, size)
                _reserve(fd, size)
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
            os.replace(tmp, path)
            fsync_directory(path.parent)
        else:
            fd = os.open(path, os.O_RDONLY if readonly else os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise StoreConfigError(
                    f"{path}: file is {actual} bytes but the configured segment size is {size}; "
                    "open the store with the geometry it was written with"
                )
            self.mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE)
        finally:
            os.close(fd)
        self.wrote_position = 0
        self.flushed_position = 0
        self.last_store_timestamp = 0
        self._holders = 0
        self._lock = threading.Lock()
        self.available = True
        # Readers slice this view; while any slice lives, the mapping cannot be closed under it.
        self.buf = memoryview(self.mm)

    def __repr__(self) -> str:
        return f"MappedFile({self.path.name}, wrote={self.wrote_position}, flushed={self.flushed_position})"

    # --- writing -------------------------------------------------------------------------
    @property
    def free_space(self) -> int:
        return self.size - self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.size

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Copy ``data`` into the file at ``pos`` (does not move wrote_position)."""
        self.mm[pos : pos + len(data)] = data

    def clear_tail(self, pos: int) -> None:
        """Zero the bytes from ``pos`` so that truncated records cannot reappear after a crash.

        Segments are written front to back, so zeroing stops at the first 1 MiB chunk that is
        already all zero: a truncated tail costs what was written, not the segment size.
        """
        chunk = 1 << 20
        zeros = bytes(chunk)
        end = min(self.size, pos - pos % chunk + chunk)
        while pos < self.size:
            n = end - pos
            if self.mm[pos:end] == zeros[:n]:
                break
            self.mm[pos:end] = zeros[:n]
            pos, end = end, min(self.size, end + chunk)

    # --- reading -------------------------------------------------------------------------
    def view(self, start: int = 0, end: int | None = None) -> memoryview:
        """A zero-copy view of ``[start, end)`` (default: up to wrote_position)."""
        return self.buf[start : self.wrote_position if end is None else end]

    def hold(self) -> bool:
        """Register a reader; False if the segment is being destroyed."""
        with self._lock:
            if not self.available:
                return False
            self._holders += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._holders -= 1

    @property
    def holders(self) -> int:
        return self._holders

    # --- durability ----------------------------------------------------------------------
    def dirty_pages(self) -> int:
        return self.wrote_position // OS_PAGE_SIZE - self.flushed_position // OS_PAGE_SIZE

    def flush(self) -> int:
        """Make everything written durable; returns the new flushed position.

        fdatasync of the file rather than msync of the range: on Linux both write back pages
        dirtied through the shared mapping, but CPython's mmap.flush holds the GIL for the whole
        msync, freezing every producer thread, while os.fdatasync releases it. Raises OSError
        on failure (callers must not swallow it).
        """
        wrote = self.wrote_position
        if wrote > self.flushed_position and not self.readonly:
            self.sync()
            self.flushed_position = wrote
        return self.flushed_position

    def sync(self) -> None:
        """fdatasync the file (writes made through the mapping included). Raises OSError."""
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    # --- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Unmap. If readers still hold views, the mapping lives until they drop them."""
        self.available = False
        self.buf.release()
        try:
            self.mm.close()
        except BufferError:
            log.debug("%s still has readers; it is unmapped when they finish", self.path)

    def destroy(self) -> None:
        """Delete the file and unmap it (readers holding views keep reading valid memory)."""
        self.close()
        self.path.unlink(missing_ok=True)
