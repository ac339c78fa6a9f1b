"""MappedFileQueue: the ordered, contiguous segments of one log (commitlog or one consume queue)."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

from rocketstore.errors import CorruptDataError
from rocketstore.storage.map_cache import MapCache
from rocketstore.storage.mapped_file import MappedFile
from rocketstore.storage.paths import (
    DEFAULT_FILE_MODE,
    fsync_directory,
    segment_files,
    segment_name,
    store_file_size,
)

__all__ = ["MappedFileQueue"]

log = logging.getLogger(__name__)

Allocator = Callable[[Path, int], MappedFile]
_MAX_OFFSET = (1 << 63) - 1


class MappedFileQueue:
    """Segments of ``file_size`` bytes in ``directory``, ordered by offset, with no gaps.

    The logical space is ``[min_offset, max_offset)``: ``min_offset`` is the first segment's
    start, ``max_offset`` the last segment's start plus its wrote position.

    Thread safety: one writer appends and rolls; readers use ``files`` lock-free. The list is
    replaced, never mutated in place, so a reader always sees a consistent snapshot.

    With a ``map_cache``, segments are mapped only while read or written (see MapCache): loading
    maps none of them.
    """

    def __init__(
        self,
        directory: Path,
        file_size: int,
        *,
        allocator: Allocator | None = None,
        readonly: bool = False,
        keep_fds: bool = False,
        file_mode: int = DEFAULT_FILE_MODE,
        map_cache: MapCache | None = None,
    ) -> None:
        self.directory = directory
        self.keep_fds = keep_fds  # see MappedFile.sync
        self.file_size = file_size
        self.readonly = readonly
        self.map_cache = map_cache
        self._allocate = allocator or functools.partial(
            MappedFile, create=True, mode=file_mode, cache=map_cache
        )
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        # The writer appends segments and the cleaner removes them: each replaces the list under
        # this lock, so neither loses the other's change. Readers never take it.
        self._files_lock = threading.Lock()
        # segments appended to through a transient pool's write buffer, oldest first, until
        # committed whole (the committer drops them; see max_offset)
        self._pooled: list[MappedFile] = []
        self._tail: MappedFile | None = None  # the file whose readahead is limited (limit_tail_readahead)

    # --- loading -------------------------------------------------------------------------
    def load(self, *, rebuildable: bool = False) -> list[str]:
        """Open every segment in the directory, all marked fully written (recovery trims them).

        ``rebuildable`` (files whose content can be rebuilt from the commitlog: consume queues):
        a segment emptied or cut short, or one after a gap, ends the files instead of refusing
        them; it and every later segment are deleted (only ignored by a read-only open), and
        what was dropped is returned, one line each. A segment of another non-zero size when
        none has the configured one is still a StoreConfigError (another geometry)."""
        segments = segment_files(self.directory)
        for start, path in segments:
            if start % self.file_size or start > _MAX_OFFSET - self.file_size:
                raise CorruptDataError(
                    f"segment {path.name} does not start at a multiple of the segment size "
                    f"({self.file_size}) within 0..2^63-1",
                    path=str(path),
                )
        dropped = self._drop_damaged(segments) if rebuildable else []
        files = []
        for _, path in segments:
            mf = MappedFile(path, self.file_size, readonly=self.readonly, cache=self.map_cache)
            mf.wrote_position = mf.flushed_position = self.file_size
            mf.keep_fd = self.keep_fds
            files.append(mf)
        for prev, cur in pairwise(files):
            if cur.from_offset != prev.from_offset + self.file_size:
                for mf in files:
                    mf.close()
                raise CorruptDataError(
                    f"segments are not contiguous: {prev.path.name} is followed by {cur.path.name}",
                    path=str(self.directory),
                )
        self.files = files
        if files:
            self.flushed_where = files[-1].from_offset + files[-1].wrote_position
        return dropped

    def _drop_damaged(self, segments: list[tuple[int, Path]]) -> list[str]:
        """Cut ``segments`` (in place) before the first one of the wrong size or after a gap;
        delete the rest unless read-only. What was dropped, described."""
        sizes = [store_file_size(path) for _, path in segments]
        geometry_holds = self.file_size in sizes
        keep = len(segments)
        for i, ((start, _), size) in enumerate(zip(segments, sizes)):
            gap = i > 0 and start != segments[i - 1][0] + self.file_size
            if gap or (size != self.file_size and (size == 0 or geometry_holds)):
                keep = i
                break
        dropped = []
        for (_, path), size in zip(segments[keep:], sizes[keep:]):
            why = f"{size} bytes, not {self.file_size}" if size != self.file_size else "after a gap"
            dropped.append(f"{path} ({why})")
            if not self.readonly:
                path.unlink(missing_ok=True)
        del segments[keep:]
        if dropped and not self.readonly:
            fsync_directory(self.directory)
        return dropped

    # --- lookup --------------------------------------------------------------------------
    @property
    def first(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    @property
    def last(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    @property
    def min_offset(self) -> int:
        files = self.files
        return files[0].from_offset if files else 0

    @property
    def max_offset(self) -> int:
        """Where the readable bytes of the log end. A transient pool's appended bytes become
        readable when committed, segment after segment: when appends rolled on to the next
        segment before the committer reached a segment's tail, the log is readable up to that
        segment's committed end only (RocketMQ's reput reads the bytes and stops there too)."""
        for mf in self._pooled:
            if mf.write_buffer is not None:
                return mf.from_offset + mf.read_position
        files = self.files
        return files[-1].from_offset + files[-1].read_position if files else 0

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding global ``offset``, or None."""
        files = self.files
        if not files:
            return None
        i = (offset - files[0].from_offset) // self.file_size
        if 0 <= i < len(files):
            return files[i]
        return None

    def next_segment_start(self, offset: int) -> int:
        """The start of the segment after the one holding ``offset``."""
        return offset + self.file_size - offset % self.file_size

    # --- writing -------------------------------------------------------------------------
    def last_for_append(self, start_offset: int = 0) -> MappedFile:
        """The segment to append to, creating the next one when the last is full (or none exists).

        ``start_offset`` places the first segment of an empty queue (aligned down to a segment).
        """
        last = self.last
        if last is not None and not last.is_full:
            if last is not self._tail:
                self.limit_tail_readahead()
            return last
        if last is None:
            start = start_offset - start_offset % self.file_size
        else:
            start = last.from_offset + self.file_size
        mf = self._allocate(self.directory / segment_name(start), self.file_size)
        mf.keep_fd = self.keep_fds
        with self._files_lock:
            self.files = [*self.files, mf]
        if mf.write_buffer is not None:
            self._pooled = [*self._pooled, mf]
        self.limit_tail_readahead()
        return mf

    def limit_tail_readahead(self, *, cut: bool = False) -> None:
        """The last file is being appended to (by this queue's writer, or the writer a follower
        follows): none of it is read ahead from where it ends now (``MappedFile.limit_readahead``);
        the file that was last before it is read ahead as any file again. ``cut``: the last file
        may be the same, cut shorter."""
        last = self.last
        if last is self._tail and not cut:
            return
        if self._tail is not None and self._tail is not last:
            self._tail.limit_readahead(None)
        if last is not None:
            last.limit_readahead(last.wrote_position)
        self._tail = last

    def truncate(self, offset: int) -> int:
        """Drop everything at or after global ``offset``: later segments deleted, the tail zeroed.

        Returns how many bytes of data (non-zero extents) were dropped. A read-only queue only
        forgets them: positions move, no byte of any file changes.
        """
        keep = []
        dropped = 0
        for mf in self.files:
            tail = mf.from_offset + self.file_size
            if tail <= offset:
                keep.append(mf)
            elif mf.from_offset <= offset:
                pos = offset - mf.from_offset
                dropped += max(0, mf.data_end(pos) - pos)
                if not self.readonly:
                    mf.clear_tail(pos)
                mf.wrote_position = pos
                mf.flushed_position = min(mf.flushed_position, pos)
                keep.append(mf)
            else:
                dropped += mf.data_end(0)
                if self.readonly:
                    mf.close()
                    continue
                log.info("deleting segment %s: it starts after the truncation point %d", mf.path, offset)
                mf.destroy()
        with self._files_lock:
            self.files = keep
        self._pooled = [mf for mf in self._pooled if mf in keep]
        self.flushed_where = min(self.flushed_where, offset)
        self.limit_tail_readahead(cut=True)  # (recovery: where the writer appends next)
        return dropped

    # --- reclaiming ----------------------------------------------------------------------
    def delete_oldest(
        self,
        expired: Callable[[MappedFile], bool],
        *,
        now_ms: int,
        forcibly_after_ms: int,
        max_files: int,
        pause: Callable[[], None],
    ) -> list[MappedFile]:
        """Delete segments from the oldest while ``expired`` says so, never the newest one, at most
        ``max_files``, calling ``pause`` between two deletions. Stops at the first segment that
        is still read (it is retried next time). Returns the deleted segments."""
        deleted: list[MappedFile] = []
        for mf in self.files[:-1]:
            if len(deleted) >= max_files or not expired(mf):
                break
            if deleted:
                pause()
            if not mf.delete_when_unread(now_ms, forcibly_after_ms):
                log.info("segment %s is still being read; deleting it later", mf.path.name)
                break
            log.info("deleted expired segment %s", mf.path)
            deleted.append(mf)
            with self._files_lock:
                self.files = [f for f in self.files if f is not mf]
        return deleted

    def flush(self, least_pages: int = 0) -> bool:
        """Flush from ``flushed_where``; True if something was flushed. Raises OSError."""
        mf = self.find(self.flushed_where)
        if mf is None:
            files = self.files
            if not files:
                return False
            # below the first segment: the segment holding flushed_where was reclaimed before it
            # was flushed, and every later one may hold unflushed bytes too
            mf = files[0] if self.flushed_where < files[0].from_offset else files[-1]
        if least_pages > 0 and not mf.is_full and mf.dirty_pages() < least_pages:
            return False
        before = self.flushed_where
        mf.flush()
        self.flushed_where = mf.from_offset + mf.flushed_position
        # a segment was flushed to its end: the next one may have data too
        if mf.flushed_position >= mf.size and mf is not self.last:
            self.flush(0)
        return self.flushed_where > before

    def commit(self, least_pages: int = 0) -> bool:
        """Commit pooled write buffers into their files, oldest first; True if anything moved."""
        moved = False
        for mf in self.files:
            if mf.write_buffer is None:
                continue
            if least_pages and not mf.wrote_position >= mf.size and mf.uncommitted_pages() < least_pages:
                break
            before = mf.committed_position
            mf.commit()
            moved |= mf.committed_position > before
            if mf.committed_position < mf.size:
                break
        if self._pooled and self._pooled[0].write_buffer is None:
            self._pooled = [mf for mf in self._pooled if mf.write_buffer is not None]
        return moved

    def flush_all(self) -> None:
        for mf in self.files:
            mf.flush()
        self.flushed_where = self.max_offset

    def close(self) -> None:
        for mf in self.files:
            mf.close()
        self.files = []
        self._pooled = []
