"""MappedFile: one fixed-size segment file, memory-mapped."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import mmap
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rocketstore.errors import CorruptDataError, StoreConfigError
from rocketstore.storage.map_cache import MapCache
from rocketstore.storage.paths import (
    DEFAULT_FILE_MODE,
    create_store_file,
    fsync_directory,
    offset_from_name,
    open_store_file,
    store_file_size,
)

__all__ = ["OS_PAGE_SIZE", "MappedFile"]

OS_PAGE_SIZE = 4096
log = logging.getLogger(__name__)
_libc_name = ctypes.util.find_library("c")
_libc = ctypes.CDLL(_libc_name, use_errno=True) if _libc_name else None
# Before 3.13 every mmap object keeps a duplicate of its file's descriptor (for size/resize,
# which nothing here uses): a mapping then costs a descriptor until it is unmapped.
_MMAP_OPTIONS: dict[str, Any] = {"trackfd": False} if sys.version_info >= (3, 13) else {}
_MADV_RANDOM: int | None = getattr(mmap, "MADV_RANDOM", None)  # (no madvise: Windows)
_MADV_NORMAL: int = getattr(mmap, "MADV_NORMAL", 0)


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

    - ``wrote_position``: end of the appended data.
    - ``committed_position``: end of the data in the file itself. Equal to wrote_position,
      except with a transient-pool ``write_buffer``: appends then go to that buffer and
      ``commit`` copies them into the mapping.
    - ``read_position``: what readers, dispatch and flushes may see: the committed data.
    - ``flushed_position``: bytes below it are known to be on disk.

    Thread safety: a single writer (whoever holds the owning log's append lock) appends and
    moves ``wrote_position`` after the bytes are in place; one committer moves
    ``committed_position``; readers read below ``read_position`` without locks. Readers hold
    slices of ``buf``, and a mapping cannot be closed while a view of it is alive (Python
    refuses): that is the reference count, so a destroyed segment stays readable for whoever
    still holds a view of it.

    Parking: a file opened with a ``MapCache`` is not mapped until ``buf`` is first read, and
    the cache may ``park`` it again (flush, then unmap) when too many files are mapped. While
    mapped, ``buf`` is a plain attribute and reading it costs nothing more; parked, the
    attribute is absent and ``__getattr__`` maps the file again under ``_map_lock``. Whoever
    holds a view (the value of ``buf``, or a slice or array of it) pins the mapping: ``park``
    fails on it and the file stays mapped. Writes to such a file therefore go through ``buf``
    too, never through ``mm``, which only the mapping code touches.

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
        write_buffer: bytearray | None = None,
        on_buffer_free: Callable[[bytearray], None] | None = None,
        mode: int = DEFAULT_FILE_MODE,
        cache: MapCache | None = None,
    ) -> None:
        self.path = path
        self.size = size
        self.from_offset = offset_from_name(path.name) if named_by_offset else 0
        self.readonly = readonly
        self._cache = cache
        self.referenced = False  # read since the cache last looked (see MapCache)
        self._map_lock = threading.Lock()
        self._readahead_end: int | None = None  # see limit_readahead
        fd: int | None = None
        if create:
            tmp = path.with_name(path.name + ".creating")
            fd = create_store_file(tmp, mode, writable=True)
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
        elif cache is None:
            fd = self._open()
        else:
            self._check_size(store_file_size(path))  # mapped when first read
        if fd is not None:
            self._attach(fd)
        self.wrote_position = 0
        self._committed = 0
        self.flushed_position = 0
        self.write_buffer = write_buffer
        self._on_buffer_free = on_buffer_free
        self.last_store_timestamp = 0
        self.available = True
        self._shutdown_at = 0
        self.keep_fd = False
        self._sync_fd: int | None = None
        self._fd_lock = threading.Lock()
        if create and cache is not None:
            cache.admit(self)

    # --- mapping -------------------------------------------------------------------------
    mm: mmap.mmap
    # Readers slice this view; while any slice lives, the mapping cannot be closed under it.
    buf: memoryview

    def _open(self) -> int:
        return open_store_file(self.path, writable=not self.readonly)

    def _check_size(self, actual: int) -> None:
        if actual != self.size:
            raise StoreConfigError(
                f"{self.path}: file is {actual} bytes but the configured segment size is {self.size}; "
                "open the store with the geometry it was written with"
            )

    def _attach(self, fd: int) -> None:
        """Map the file open at ``fd`` and close ``fd`` (the mapping does not need it)."""
        try:
            st = os.fstat(fd)
            self._check_size(st.st_size)
            self._identity = (st.st_dev, st.st_ino)
            access = mmap.ACCESS_READ if self.readonly else mmap.ACCESS_WRITE
            self.mm = mmap.mmap(fd, self.size, access=access, **_MMAP_OPTIONS)
        finally:
            os.close(fd)
        if self._readahead_end is not None:
            self._advise(self.mm, self._readahead_end, mmap_random=True)
        self.buf = memoryview(self.mm)

    def limit_readahead(self, end: int | None) -> None:
        """Have the kernel read none of this file ahead from ``end`` on (rounded down to a page),
        or, with None, read it ahead as any file again.

        For the part of a file still being appended (the newest segment of a log or queue, from
        where it ended when its writer or follower came to it) and for files read at random (the
        index). Readahead there reads holes: the kernel fills whole windows of the file with
        zeros, up to the device's read_ahead_kb at once (8 MiB seen, 20-25 ms of one page fault
        of the writer or of a follower reading right behind it), only for the writer to
        overwrite them. Bytes appended later are read from the page cache they were written to."""
        with self._map_lock:
            was, self._readahead_end = self._readahead_end, end
            mm = self.__dict__.get("mm")
            if mm is None or mm.closed:
                return  # (parked or closed: a mapping made again takes the advice as it is now)
            if end is not None:
                self._advise(mm, end, mmap_random=True)
            elif was is not None:
                self._advise(mm, was, mmap_random=False)

    def _advise(self, mm: mmap.mmap, end: int, *, mmap_random: bool) -> None:
        if _MADV_RANDOM is None:
            return
        start = min(end, self.size) // mmap.PAGESIZE * mmap.PAGESIZE
        if start < self.size:
            mm.madvise(_MADV_RANDOM if mmap_random else _MADV_NORMAL, start, self.size - start)

    if not TYPE_CHECKING:  # to mypy, ``buf`` is always there

        def __getattr__(self, name: str) -> memoryview:
            if name != "buf" or "_map_lock" not in self.__dict__:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            return self._remap()

    def _remap(self) -> memoryview:
        """Map a parked file again (``buf`` was read while it was parked) and tell the cache."""
        with self._map_lock:
            view = self.__dict__.get("buf")
            mapped_now = view is None
            if view is None:
                self._attach(self._open())
                view = self.buf
        if mapped_now and self._cache is not None:
            self._cache.admit(self)  # outside _map_lock: the cache may park other files
        return view

    def check_intact(self, end: int) -> None:
        """Raise CorruptDataError if the file no longer holds its first ``end`` bytes: another
        process truncated it under the mapping, and touching a page past the file's end would
        kill this process (SIGBUS, which Python cannot catch). One size query, for a read or
        write of a region, not per record; a file deleted or replaced under the mapping is
        intact unless the mapped file itself was cut (the mapping keeps the old file's pages)."""
        intact = self.intact_end()
        if intact < end:
            raise CorruptDataError(
                f"the file is {intact} bytes, not {self.size}: it was truncated under the store "
                f"(by another process); what it held from byte {intact} on is gone",
                path=str(self.path),
                offset=self.from_offset + intact,
            )

    def intact_end(self) -> int:
        """How many bytes from the start of the mapping may be touched (see ``check_intact``).
        While mapped, the size of the very file mapped: the mmap's own descriptor answers, with no
        path to look up (a third of ``os.stat``'s time; a put checks each file it writes)."""
        mm: mmap.mmap | None = self.__dict__.get("mm")
        if mm is not None:
            try:
                return min(self.size, mm.size())
            except (ValueError, OSError):
                pass  # parked or closed meanwhile: the path says what a new mapping would map
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return self.size
        if (st.st_dev, st.st_ino) != self.__dict__.get("_identity"):
            return self.size
        return min(self.size, st.st_size)

    @property
    def parked(self) -> bool:
        return "mm" not in self.__dict__

    def park(self) -> bool:
        """Flush what was written, then unmap; the next read of ``buf`` maps the file again.
        False, and still mapped, while a reader holds a view. Raises the flush's OSError (the
        file then stays mapped, its writes not lost)."""
        with self._map_lock:
            if "mm" not in self.__dict__:
                return True
            if self.available:
                self.flush()
                view: memoryview | None = self.__dict__.pop("buf")
            else:
                view = None  # closed or deleted: ``buf`` stays the empty view it was given
            mm = self.__dict__.pop("mm")
            del view  # ours was the last reference unless a reader holds one
            try:
                mm.close()
            except BufferError:
                self.mm = mm
                if self.available:
                    self.buf = memoryview(mm)
                return False
            return True

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
        """Copy ``data`` to ``pos`` of the write target (does not move wrote_position).

        With ``keep_fd``, a write of a page or more goes through pwrite, as RocketMQ's
        FileChannel.write does: copying into pages of the mapping that were never touched
        costs a page fault each (measured 4x the time of pwrite, which lets the GIL go too).
        The mapping reads the same page cache, and ``sync`` covers both."""
        if self.write_buffer is None:
            self._to_file(pos, data)
        else:
            self.write_buffer[pos : pos + len(data)] = data

    def _to_file(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        if self.keep_fd and len(data) >= OS_PAGE_SIZE:
            self._pwrite(pos, data)  # a file cut short under the store grows back: no SIGBUS
        else:
            self.check_intact(pos + len(data))
            self.buf[pos : pos + len(data)] = data

    def _pwrite(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        fd = self._descriptor()
        while view:
            n = os.pwrite(fd, view, pos)
            view, pos = view[n:], pos + n

    @property
    def committed_position(self) -> int:
        return self._committed if self.write_buffer is not None else self.wrote_position

    @committed_position.setter
    def committed_position(self, value: int) -> None:
        self._committed = value

    @property
    def read_position(self) -> int:
        """Readers, dispatch and flushes see the bytes below this."""
        return self._committed if self.write_buffer is not None else self.wrote_position

    def commit(self) -> int:
        """Copy appended bytes from the write buffer into the mapping; returns committed_position.

        Once the segment is full and committed, its buffer goes back to the pool and the
        segment behaves like any other.
        """
        buffer = self.write_buffer
        if buffer is None:
            return self.wrote_position
        wrote, start = self.wrote_position, self._committed
        if wrote > start:
            self._to_file(start, memoryview(buffer)[start:wrote])
            self._committed = wrote
        if wrote >= self.size:
            self.write_buffer = None
            if self._on_buffer_free is not None:
                self._on_buffer_free(buffer)
        return wrote

    def uncommitted_pages(self) -> int:
        return self.wrote_position // OS_PAGE_SIZE - self.committed_position // OS_PAGE_SIZE

    def rewind(self, position: int) -> None:
        """Erase appended bytes past ``position`` (an append that failed half way): zeroed, so
        that recovery cannot find them after a restart either."""
        wrote = self.wrote_position
        if wrote > position:
            target = self.write_buffer if self.write_buffer is not None else self.buf
            target[position:wrote] = bytes(wrote - position)
        if self.write_buffer is not None and self._committed > position:
            self.buf[position : self._committed] = bytes(self._committed - position)
            self._committed = position
        self.wrote_position = position
        self.flushed_position = min(self.flushed_position, position)

    def data_end(self, pos: int = 0) -> int:
        """Position just past the last non-zero byte at or after ``pos``, found the way
        ``clear_tail`` zeroes: 1 MiB chunks up to the first all-zero one."""
        chunk = 1 << 20
        end = pos
        start = pos
        while start < self.size:
            stop = min(self.size, start - start % chunk + chunk)
            # a copy: numpy refuses to scan memory that another process may be writing meanwhile
            nonzero = np.flatnonzero(np.frombuffer(self.buf[start:stop].tobytes(), dtype=np.uint8))
            if not len(nonzero):
                break
            end = start + int(nonzero[-1]) + 1
            start = stop
        return end

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
            buf = self.buf
            if buf[pos:end] == zeros[:n]:
                break
            buf[pos:end] = zeros[:n]
            pos, end = end, min(self.size, end + chunk)

    def warm(self) -> bool:
        """Fault every page in now (a zero written to each), sync, and lock the pages in memory
        where the OS allows; returns whether they were locked. Run off the hot path (the
        allocator thread): writing into a fresh segment then never waits for a page fault, and
        the first flush after a roll does not have to write the whole segment."""
        pages = np.frombuffer(self.mm, dtype=np.uint8)
        pages[::OS_PAGE_SIZE] = 0
        del pages
        self.sync()
        anchor = ctypes.c_char.from_buffer(self.mm)
        address = ctypes.addressof(anchor)
        del anchor
        if _libc is None or _libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(self.size)) != 0:
            log.info(
                "%s: pages touched but not locked in memory (mlock refused: %s)",
                self.path,
                os.strerror(ctypes.get_errno()) if _libc is not None else "no libc",
            )
            return False
        return True

    # --- durability ----------------------------------------------------------------------
    def dirty_pages(self) -> int:
        return self.read_position // OS_PAGE_SIZE - self.flushed_position // OS_PAGE_SIZE

    def flush(self) -> int:
        """Make everything written durable; returns the new flushed position.

        fdatasync of the file rather than msync of the range: on Linux both write back pages
        dirtied through the shared mapping, but CPython's mmap.flush holds the GIL for the whole
        msync, freezing every producer thread, while os.fdatasync releases it. Raises OSError
        on failure (callers must not swallow it).
        """
        readable = self.read_position
        if readable > self.flushed_position and not self.readonly:
            self.sync()
            self.flushed_position = readable
            if readable >= self.size:
                self._close_sync_fd()  # full and durable: no write or sync will need it again
        return self.flushed_position

    def sync(self) -> None:
        """fdatasync the file (writes made through the mapping included). Raises OSError.

        With ``keep_fd`` the descriptor stays open between syncs: opening and closing it each time
        costs two more trips through the GIL, which producer threads waiting on a group commit
        feel. (Set on commitlog segments only: a store can have thousands of queue files.)
        Without it each sync opens its own descriptor: the flusher and a thread parking the file
        (MapCache) may sync it at the same time, and neither may close the other's.

        A segment deleted under the flusher (reclamation, a cut log) has nothing left to make
        durable: whoever deletes marks it unavailable before the unlink and closes the kept
        descriptor under ``_fd_lock``, which a sync holds, so a sync either ends before the
        descriptor goes or finds the file unavailable and, when it is gone, skips it. A file
        missing while still available is a real error and raises.
        """
        if self.keep_fd:
            with self._fd_lock:
                fd = self._sync_fd
                if fd is None and self.available:
                    fd = self._sync_fd = open_store_file(self.path, writable=True)
                if fd is not None:
                    os.fdatasync(fd)
                    return
        try:
            fd = open_store_file(self.path, writable=True)
        except FileNotFoundError:
            if self.available:
                raise
            return  # deleted after it stopped being served: its bytes went with it
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def _descriptor(self) -> int:
        fd = self._sync_fd
        if fd is None:
            with self._fd_lock:  # the appending thread and the flusher may both get here first
                fd = self._sync_fd
                if fd is None:
                    fd = self._sync_fd = open_store_file(self.path, writable=True)
        return fd

    def _close_sync_fd(self) -> None:
        with self._fd_lock:  # never under a sync that is using it
            fd, self._sync_fd = self._sync_fd, None
        if fd is not None:
            os.close(fd)

    # --- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Unmap. If readers still hold views, the mapping lives until they drop them."""
        if self._cache is not None:
            self._cache.discard(self)
        with self._map_lock:
            self.available = False
            self._close_sync_fd()
            if self.write_buffer is not None and self._on_buffer_free is not None:
                self._on_buffer_free(self.write_buffer)
            self.write_buffer = None
            mm = self.__dict__.get("mm")
            # the view is dropped, never released: a reader that took ``buf`` before this (and
            # messages decoded lazily from it) keeps a working view, and with it the mapping
            self.buf = memoryview(b"")
        if mm is None:
            return
        try:
            mm.close()
        except BufferError:
            log.debug("%s still has readers; it is unmapped when they finish", self.path)

    @property
    def last_modified_ms(self) -> int:
        """The file's mtime (the time of its last write reaching the file), as RocketMQ's expiry uses."""
        return os.stat(self.path).st_mtime_ns // 1_000_000

    def delete_when_unread(self, now_ms: int, forcibly_after_ms: int) -> bool:
        """Reclaim this segment: stop serving it, then delete it once no reader holds a view of
        it, or anyway ``forcibly_after_ms`` after the first attempt (readers still holding views
        keep valid pages: an unlinked file stays mapped until its last view goes). True when
        the file is gone; call again later when False.

        Order matters for lock-free readers, which take ``buf`` before checking ``available``:
        ``available`` falls first, so a reader either sees it down or holds the old view, and
        then the mapping waits for that view.
        """
        if self.available:
            if self._cache is not None:
                self._cache.discard(self)
            with self._map_lock:
                self.available = False
                self._close_sync_fd()
                self._shutdown_at = now_ms
                self.buf = memoryview(b"")  # the old view dies with its last reader: no release() under them
        try:
            with self._map_lock:
                if "mm" in self.__dict__:
                    self.mm.close()
        except BufferError:
            if now_ms - self._shutdown_at < forcibly_after_ms:
                return False
            log.warning(
                "%s: still read %d ms after its deletion began; deleted anyway", self.path, forcibly_after_ms
            )
        self.path.unlink(missing_ok=True)
        return True

    def destroy(self) -> None:
        """Delete the file and unmap it (readers holding views keep reading valid memory)."""
        self.close()
        self.path.unlink(missing_ok=True)
