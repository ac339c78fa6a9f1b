"""The hash index over message keys: IndexFile (one file) and IndexService (all of them)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rocketstore.clock import Clock
from rocketstore.codec import index_layout as layout
from rocketstore.codec.java_hash import index_key_hash, index_key_hashes
from rocketstore.codec.text_column import TextColumn
from rocketstore.dispatch_request import DispatchBatch, DispatchRequest
from rocketstore.errors import CorruptDataError, StorePathError
from rocketstore.message import MessageExt, split_keys
from rocketstore.storage.map_cache import MapCache
from rocketstore.storage.mapped_file import MappedFile
from rocketstore.storage.paths import (
    DEFAULT_FILE_MODE,
    REGULAR_FILE,
    index_file_name,
    is_index_name,
    list_store_dir,
)

__all__ = ["IndexFile", "IndexService", "batch_key_hashes", "new_index_path"]

log = logging.getLogger(__name__)
# at most this many requests a round are hashed as Python (``IndexService._insert_few``)
_HASHED_IN_PYTHON = 4
_INT_MAX = 0x7FFFFFFF
_SLOT = layout.SLOT
_ENTRY = layout.ENTRY


def batch_key_hashes(
    batch: DispatchBatch, first: int = 0
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The index hashes of the keys of records ``first`` onwards of ``batch``, in the order
    they are put (``topic#UNIQ_KEY``, then ``topic#k`` for each key in KEYS): (hashes, record
    of each)."""
    return index_key_hashes(
        [f"{t}#" for t in batch.topics], batch.topic_ids, first, batch.uniq_keys, batch.keys
    )


def new_index_path(directory: Path, ms: int, after: str | None) -> Path:
    """Where a new index file created at clock time ``ms`` goes: named by that time, a
    millisecond later while the name is taken or not after ``after`` (the newest file's name)."""
    path = directory / index_file_name(ms)
    while os.path.lexists(path) or (after is not None and path.name <= after):
        ms += 1
        path = directory / index_file_name(ms)
    return path


class IndexFile:
    """One index file (layout in ``codec.index_layout``).

    ``put_key`` follows RocketMQ's IndexFile.putKey exactly, so files are byte-identical to
    what RocketMQ writes for the same keys in the same order. The header is kept in memory and
    written back after every batch of puts.

    Thread safety: one writer (the dispatcher); readers may walk chains concurrently, since
    an entry is complete before the slot pointing at it is updated. With a ``map_cache`` the
    file is mapped only while used: ``buf`` is read from the mapping each time, never kept.
    """

    def __init__(
        self,
        path: Path,
        hash_slots: int,
        max_entries: int,
        *,
        create: bool = False,
        readonly: bool = False,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
        mode: int = DEFAULT_FILE_MODE,
        map_cache: MapCache | None = None,
    ) -> None:
        self.path = path
        self.hash_slots = hash_slots
        self.max_entries = max_entries
        size = layout.file_size(hash_slots, max_entries)
        self._file = _IndexMapping(path, size, create=create, readonly=readonly, mode=mode, cache=map_cache)
        if create:
            self.header = layout.IndexHeader()
            if end_phy_offset > 0:
                self.header.begin_phy_offset = self.header.end_phy_offset = end_phy_offset
            if end_timestamp > 0:
                self.header.begin_timestamp = self.header.end_timestamp = end_timestamp
            self.write_header()
        else:
            self.header = layout.decode_header(self.buf)
            self._header_stale = self.header.index_count <= 0  # (written as 1 at the next flush)
            if self._header_stale:
                self.header.index_count = 1
            if not 1 <= self.header.index_count <= max_entries:
                raise CorruptDataError(
                    f"index file header says {self.header.index_count} entries, the file holds {max_entries}",
                    path=str(path),
                    offset=36,
                )
        self._entries_base = layout.entry_position(hash_slots, 0)

    @property
    def buf(self) -> memoryview:
        return self._file.buf

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def is_full(self) -> bool:
        return self.header.index_count >= self.max_entries

    def write_header(self) -> None:
        self.buf[: layout.HEADER_SIZE] = layout.encode_header(self.header)
        self._header_stale = False

    def put_keys(
        self,
        key_hashes: npt.NDArray[np.int64],
        phy_offsets: npt.NDArray[np.int64],
        store_timestamps: npt.NDArray[np.int64],
    ) -> int:
        """Add many keys in order; returns how many fit (the rest need the next file).

        The bytes are exactly those of RocketMQ's putKey called once per key: each entry links
        to the previous entry of its slot (earlier in this batch, or already in the file), the
        first entry of an empty file takes its time diff against the begin time the file was
        created with, and a slot counts in hashSlotCount when its first entry lands in it.
        """
        h = self.header
        m = min(len(key_hashes), self.max_entries - h.index_count)
        if m <= 0:
            return 0
        self._file.referenced = True
        first_ever = h.index_count <= 1
        h.index_count, new_slots = layout.put_keys(
            np.frombuffer(self.buf, dtype=np.uint8),
            self.hash_slots,
            h.index_count,
            h.begin_timestamp,
            key_hashes[:m],
            phy_offsets[:m],
            store_timestamps[:m],
        )
        if first_ever:
            h.begin_phy_offset = int(phy_offsets[0])
            h.begin_timestamp = int(store_timestamps[0])
        h.hash_slot_count += new_slots
        h.end_phy_offset = int(phy_offsets[m - 1])
        h.end_timestamp = int(store_timestamps[m - 1])
        self._header_stale = True
        return m

    def repair_slots(self) -> int:
        """After a crash inside a batch of puts: entries and slots reach past the header's
        indexCount (written last). Point each such slot back at the newest counted entry of its
        chain, so chains are exactly what the header covers. Returns how many slots moved."""
        count = self.header.index_count
        slots = np.frombuffer(
            self.buf, dtype=layout.SLOT_DTYPE, count=self.hash_slots, offset=layout.HEADER_SIZE
        )
        beyond = np.flatnonzero(slots >= count)
        for slot in beyond.tolist():
            current = int(slots[slot])
            while current >= count:
                if current >= self.max_entries:
                    current = 0
                    break
                prev = _ENTRY.unpack_from(self.buf, self._entries_base + current * layout.ENTRY_SIZE)[3]
                current = prev if 0 <= prev < current else 0
            slots[slot] = current
        del slots
        return len(beyond)

    def time_matched(self, begin: int, end: int) -> bool:
        b, e = self.header.begin_timestamp, self.header.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def lookup(self, key: str, begin: int, end: int) -> Iterator[int]:
        """Physical offsets of entries whose hash matches ``key`` and time is in [begin, end].

        Newest first. Candidates only: callers compare the real key. Walks each chain by
        strictly decreasing entry numbers, so a corrupt chain cannot loop.
        """
        key_hash = index_key_hash(key)
        self._file.referenced = True
        buf, h = self.buf, self.header  # the view first: see MappedFile.delete_when_unread
        if not self._file.available:
            return
        # A slot may name an entry past the header's count: the writer (maybe another process)
        # writes the entry, then the slot, then the count. The entry is whole, and the chain
        # behind it holds the older entries: follow it (a candidate is checked against its record).
        current = _SLOT.unpack_from(buf, layout.HEADER_SIZE + (key_hash % self.hash_slots) * 4)[0]
        if current <= 0 or current >= self.max_entries:
            return
        while True:
            kh, phy, diff, prev = _ENTRY.unpack_from(buf, self._entries_base + current * layout.ENTRY_SIZE)
            if diff < 0:
                return
            time_read = h.begin_timestamp + diff * 1000
            if kh == key_hash and begin <= time_read <= end:
                yield phy
            if prev <= 0 or prev >= current or time_read < begin:
                return
            current = prev

    def flush(self) -> None:
        # The store writes the header with each batch of keys (IndexService._insert): then a
        # flush only syncs, and a file the map cache parked is synced by its path, not mapped
        # again (which would push out a file a reader uses).
        if self._header_stale:
            self.write_header()
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def destroy(self) -> None:
        self._file.destroy()

    def delete_when_unread(self, now_ms: int, forcibly_after_ms: int) -> bool:
        """Reclaim this file (see ``MappedFile.delete_when_unread``); True when it is gone. Lookups
        skip it from the first attempt on (it is unavailable), so an empty view is never read."""
        return self._file.delete_when_unread(now_ms, forcibly_after_ms)


class _IndexMapping(MappedFile):
    """An index file is a fixed-size mapped file whose name is a time, not an offset."""

    def __init__(
        self, path: Path, size: int, *, create: bool, readonly: bool, mode: int, cache: MapCache | None
    ) -> None:
        super().__init__(
            path, size, create=create, readonly=readonly, named_by_offset=False, mode=mode, cache=cache
        )
        self.wrote_position = size
        self.limit_readahead(0)  # slots and entries are read and written at random

    def flush(self) -> int:
        if not self.readonly:
            self.sync()
        return self.size


class IndexService:
    """All index files of a store, oldest first (STORE.md §5).

    Keys indexed per message: ``topic#UNIQ_KEY`` and ``topic#k`` for every key in KEYS. A
    record is indexed once: records before the newest file's endPhyOffset are skipped, which
    makes re-dispatch after recovery idempotent. (RocketMQ skips only records *before* the
    endPhyOffset, so it indexes the last record twice when it re-dispatches it; here records
    at or before the last indexed one are skipped.)
    """

    def __init__(
        self,
        directory: Path,
        hash_slots: int,
        max_entries: int,
        clock: Clock,
        *,
        readonly: bool = False,
        file_mode: int = DEFAULT_FILE_MODE,
        map_cache: MapCache | None = None,
    ) -> None:
        self.directory = directory
        self.file_mode = file_mode
        self._map_cache = map_cache
        self.hash_slots = hash_slots
        self.max_entries = max_entries
        self._clock = clock
        self.readonly = readonly
        self.files: list[IndexFile] = []
        self._reindex_from: int | None = None
        self._files_lock = threading.Lock()  # the dispatcher adds files, the cleaner removes them

    def load(self) -> None:
        """Open every index file (17-digit names; other names are logged and left alone). An index
        file's name on anything but a regular file is a StorePathError."""
        for entry in list_store_dir(self.directory):
            if not is_index_name(entry.name):
                if not entry.name.endswith(".creating"):
                    log.warning("ignoring %s: not an index file name", entry.path)
                continue
            if not entry.is_file:
                raise StorePathError(entry.path, f"{REGULAR_FILE} (an index file)", entry.kind)
            f = IndexFile(
                entry.path,
                self.hash_slots,
                self.max_entries,
                readonly=self.readonly,
                map_cache=self._map_cache,
            )
            self.files.append(f)
        if not self.files:
            return
        last = self.files[-1]
        if not self.readonly and (moved := last.repair_slots()):
            log.warning(
                "index file %s: %d hash slots pointed past the entry count (interrupted write); restored",
                last.path,
                moved,
            )
        h = last.header
        if h.index_count >= self.max_entries or (h.index_count <= 1 and h.end_phy_offset > 0):
            # The file filled up, maybe in the middle of one record's keys, and the next file
            # was not written: that record's remaining keys may be missing. Index it again.
            self._reindex_from = h.end_phy_offset

    @property
    def last_indexed_offset(self) -> int:
        """Commitlog offset of the newest indexed record, -1 if none."""
        if not self.files:
            return -1
        h = self.files[-1].header
        return h.end_phy_offset if h.index_count > 1 or h.end_phy_offset > 0 else -1

    def lost_newest(
        self, log_start: int, log_end: int, record_at: Callable[[int], MessageExt | None]
    ) -> str | None:
        """Index files lost after the last one left (the newest deleted, or every one), as a line
        for the recovery report, None when none seem lost: none left while the log's first
        record has keys, or the last one full while the log goes on past the record it ends at
        (the next file is started by the next record with keys). Records from where the lost
        files began are indexed again."""
        if not self.files:
            first = record_at(log_start) if log_start < log_end else None
            if first is None or not (first.keys or first.uniq_key):
                return None
            self._rebuild_from(log_start)
            return f"index: no index file left for the commitlog's records: indexed again from {log_start}"
        last = self.files[-1]
        h = last.header
        if h.index_count < self.max_entries:
            return None
        record = record_at(h.end_phy_offset)
        if record is None or h.end_phy_offset + record.store_size >= log_end:
            return None
        self._rebuild_from(h.end_phy_offset)  # load did so already: the last record's keys may be split
        return (
            f"index: {last.path} is full and the commitlog goes on past its last record (the index file "
            f"after it deleted): indexed again from {h.end_phy_offset}"
        )

    @property
    def reindex_from(self) -> int | None:
        """Recovery dropped index entries from this commitlog offset on; they must be rebuilt."""
        return self._reindex_from

    @property
    def indexed_through(self) -> int:
        """Records at or before this commitlog offset are indexed (-1: none known)."""
        last = self.last_indexed_offset
        return last if self._reindex_from is None else min(last, self._reindex_from - 1)

    def _writable_file(self) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full:
            return last
        end_phy = last.header.end_phy_offset if last else 0
        end_ts = last.header.end_timestamp if last else 0
        if last is not None:
            last.flush()  # a full file is final: make it durable before moving on
        path = new_index_path(self.directory, self._clock.now_ms(), last.name if last else None)
        f = IndexFile(
            path,
            self.hash_slots,
            self.max_entries,
            create=True,
            end_phy_offset=end_phy,
            end_timestamp=end_ts,
            mode=self.file_mode,
            map_cache=self._map_cache,
        )
        with self._files_lock:
            self.files = [*self.files, f]
        return f

    def build_batch(self, batch: DispatchBatch) -> None:
        """Index the keys of a batch, hashed by one compiled pass over its key columns."""
        if not (batch.uniq_keys.any() or batch.keys.any()):
            return
        phys = batch.physical_offsets
        hashes, rows = batch_key_hashes(batch, int(np.searchsorted(phys, self.indexed_through, side="right")))
        self._insert(hashes, phys[rows], batch.store_timestamps[rows])

    def build(self, requests: Iterable[DispatchRequest]) -> None:
        """Index the keys of ``requests`` (in log order): read into columns, hashed by the
        compiled pass ``build_batch`` uses."""
        last_indexed = self.indexed_through
        # (fields by position: 0 physical offset, 2 topic, 6 store time, 8 keys, 9 uniq key)
        wanted = [r for r in requests if (r[9] is not None or r[8]) and r[0] > last_indexed]
        if not wanted:
            return
        if len(wanted) <= _HASHED_IN_PYTHON:
            self._insert_few(wanted)
            return
        phys, _, topics, _, _, _, stamps, _, keys, uniqs = zip(*wanted)
        topic_index = {t: i for i, t in enumerate(dict.fromkeys(topics))}
        hashes, rows = index_key_hashes(
            [f"{t}#" for t in topic_index],
            np.fromiter(map(topic_index.__getitem__, topics), dtype=np.int64, count=len(wanted)),
            0,
            TextColumn.from_texts(uniqs),
            TextColumn.from_texts(keys),
        )
        self._insert(hashes, np.array(phys, dtype=np.int64)[rows], np.array(stamps, dtype=np.int64)[rows])

    def _insert_few(self, requests: list[DispatchRequest]) -> None:
        """``build`` of a few requests (a lone send's): each key hashed by ``index_key_hash``
        as Python, which for a few keys costs less than the columns and the compiled pass."""
        hashes: list[int] = []
        phys: list[int] = []
        stamps: list[int] = []
        for r in requests:
            prefix = f"{r.topic}#"
            keys = [r.uniq_key] if r.uniq_key else []
            keys += split_keys(r.keys)
            hashes += [index_key_hash(prefix + k) for k in keys]
            phys += [r.physical_offset] * len(keys)
            stamps += [r.store_timestamp] * len(keys)
        if hashes:
            self._insert(
                np.array(hashes, dtype=np.int64),
                np.array(phys, dtype=np.int64),
                np.array(stamps, dtype=np.int64),
            )

    def _insert(
        self, hashes: npt.NDArray[np.int64], phys: npt.NDArray[np.int64], stamps: npt.NDArray[np.int64]
    ) -> None:
        done = 0
        while done < len(hashes):
            f = self._writable_file()
            done += f.put_keys(hashes[done:], phys[done:], stamps[done:])
            f.write_header()

    def lookup(self, topic: str, key: str, begin: int, end: int) -> Iterator[int]:
        """Candidate physical offsets for ``topic#key`` with index time in [begin, end], newest first."""
        full_key = f"{topic}#{key}"
        seen: set[int] = set()
        for f in reversed(self.files):
            if f.time_matched(begin, end):
                for phy in f.lookup(full_key, begin, end):
                    if phy not in seen:
                        seen.add(phy)
                        yield phy
            if f.header.begin_timestamp < begin:
                break

    def drop_newer_than(self, timestamp: int) -> int | None:
        """After a crash: drop the index files whose entries reach past ``timestamp`` (the
        checkpoint's index time), since after a power loss their header may count entries that
        never reached the disk. RocketMQ deletes them; here the commitlog offset to rebuild them
        from is returned, and the caller re-dispatches from there."""
        dropped = self._drop(
            lambda h: h.end_timestamp > timestamp, "it reaches past the checkpoint's index time"
        )
        return self._rebuild_from(
            min((h.begin_phy_offset for h in dropped if h.index_count > 1), default=None)
        )

    def truncate_after(self, offset: int) -> int | None:
        """Forget index entries of records at or past ``offset`` (the commitlog was cut there).

        Entries cannot be unlinked from hash chains, so a file holding entries on both sides of
        ``offset`` is deleted whole and the commitlog offset its entries started at is returned:
        the caller re-dispatches from there and nothing before ``offset`` stays unindexed.
        """
        dropped = self._drop(
            lambda h: h.end_phy_offset >= offset, f"it indexes records past commitlog offset {offset}"
        )
        return self._rebuild_from(
            min(
                (h.begin_phy_offset for h in dropped if h.index_count > 1 and h.begin_phy_offset < offset),
                default=None,
            )
        )

    def _drop(self, doomed: Callable[[layout.IndexHeader], bool], reason: str) -> list[layout.IndexHeader]:
        """Delete (read-only: only forget) the files ``doomed`` picks; their headers. An empty
        file counts too: its header carries on the end of the file before it, which would make
        the records after that end look indexed already."""
        keep: list[IndexFile] = []
        dropped: list[layout.IndexHeader] = []
        for f in self.files:
            if not doomed(f.header):
                keep.append(f)
                continue
            dropped.append(f.header)
            if self.readonly:
                # a reader cannot rebuild the file as the writer's recovery will: it keeps it, and
                # every candidate is checked against the recovered log anyway
                keep.append(f)
                continue
            log.info("deleting index file %s: %s", f.path, reason)
            f.destroy()
        self.files = keep
        return dropped

    def _rebuild_from(self, offset: int | None) -> int | None:
        """Records from ``offset`` on must be indexed again, even those an older file's end names
        (a record whose keys were split across two files)."""
        if offset is not None:
            current = self._reindex_from
            self._reindex_from = offset if current is None else min(current, offset)
        return offset

    def delete_expired(self, commitlog_min_offset: int, *, now_ms: int, forcibly_after_ms: int) -> int:
        """Delete the files (never the newest) whose every entry points below the commitlog's
        min offset, oldest first; stops at one still being read. Returns how many were deleted."""
        deleted = 0
        for f in self.files[:-1]:
            if f.header.end_phy_offset >= commitlog_min_offset:
                break
            if not f.delete_when_unread(now_ms, forcibly_after_ms):
                break
            log.info("deleted index file %s: it indexes only reclaimed records", f.path)
            with self._files_lock:
                self.files = [g for g in self.files if g is not f]
            deleted += 1
        return deleted

    def flush(self) -> None:
        for f in self.files[-2:]:
            f.flush()

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []
