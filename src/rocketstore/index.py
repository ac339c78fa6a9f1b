"""The hash index over message keys: IndexFile (one file) and IndexService (all of them)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

from rocketstore.clock import Clock
from rocketstore.codec import index_layout as layout
from rocketstore.codec.java_hash import index_key_hash
from rocketstore.dispatch_request import DispatchBatch, DispatchRequest
from rocketstore.errors import CorruptDataError
from rocketstore.storage.mapped_file import MappedFile
from rocketstore.storage.paths import index_file_name

__all__ = ["IndexFile", "IndexService"]

log = logging.getLogger(__name__)
_INT_MAX = 0x7FFFFFFF
_SLOT = layout.SLOT
_ENTRY = layout.ENTRY


class IndexFile:
    """One index file (layout in ``codec.index_layout``).

    ``put_key`` follows RocketMQ's IndexFile.putKey exactly, so files are byte-identical to
    what RocketMQ writes for the same keys in the same order. The header is kept in memory and
    written back after every batch of puts.

    Thread safety: one writer (the dispatcher); readers may walk chains concurrently, since
    an entry is complete before the slot pointing at it is updated.
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
    ) -> None:
        self.path = path
        self.hash_slots = hash_slots
        self.max_entries = max_entries
        size = layout.file_size(hash_slots, max_entries)
        self._file = _IndexMapping(path, size, create=create, readonly=readonly)
        self.buf = self._file.buf
        if create:
            self.header = layout.IndexHeader()
            if end_phy_offset > 0:
                self.header.begin_phy_offset = self.header.end_phy_offset = end_phy_offset
            if end_timestamp > 0:
                self.header.begin_timestamp = self.header.end_timestamp = end_timestamp
            self.write_header()
        else:
            self.header = layout.decode_header(self.buf)
            if self.header.index_count <= 0:
                self.header.index_count = 1
            if not 1 <= self.header.index_count <= max_entries:
                raise CorruptDataError(
                    f"index file header says {self.header.index_count} entries, the file holds {max_entries}",
                    path=str(path),
                    offset=36,
                )
        self._entries_base = layout.entry_position(hash_slots, 0)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def is_full(self) -> bool:
        return self.header.index_count >= self.max_entries

    def write_header(self) -> None:
        self.buf[: layout.HEADER_SIZE] = layout.encode_header(self.header)

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add ``key`` -> ``phy_offset``; False if the file is full."""
        h = self.header
        if h.index_count >= self.max_entries:
            return False
        key_hash = index_key_hash(key)
        slot_pos = layout.HEADER_SIZE + (key_hash % self.hash_slots) * 4
        buf = self.buf
        slot_value = _SLOT.unpack_from(buf, slot_pos)[0]
        if slot_value <= 0 or slot_value > h.index_count:
            slot_value = 0
        if h.begin_timestamp <= 0:
            time_diff = 0
        else:
            time_diff = min(max((store_timestamp - h.begin_timestamp) // 1000, 0), _INT_MAX)
        _ENTRY.pack_into(
            buf,
            self._entries_base + h.index_count * layout.ENTRY_SIZE,
            key_hash,
            phy_offset,
            time_diff,
            slot_value,
        )
        _SLOT.pack_into(buf, slot_pos, h.index_count)
        if h.index_count <= 1:
            h.begin_phy_offset = phy_offset
            h.begin_timestamp = store_timestamp
        if slot_value == 0:
            h.hash_slot_count += 1
        h.index_count += 1
        h.end_phy_offset = phy_offset
        h.end_timestamp = store_timestamp
        return True

    def time_matched(self, begin: int, end: int) -> bool:
        b, e = self.header.begin_timestamp, self.header.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def lookup(self, key: str, begin: int, end: int) -> Iterator[int]:
        """Physical offsets of entries whose hash matches ``key`` and time is in [begin, end].

        Newest first. Candidates only: callers compare the real key. Walks each chain by
        strictly decreasing entry numbers, so a corrupt chain cannot loop.
        """
        key_hash = index_key_hash(key)
        buf, h = self.buf, self.header
        count = h.index_count
        current = _SLOT.unpack_from(buf, layout.HEADER_SIZE + (key_hash % self.hash_slots) * 4)[0]
        if current <= 0 or current > count or count <= 1:
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
        self.write_header()
        self._file.flush()

    def close(self) -> None:
        self.buf = memoryview(b"")
        self._file.close()

    def destroy(self) -> None:
        self.buf = memoryview(b"")
        self._file.destroy()


class _IndexMapping(MappedFile):
    """An index file is a fixed-size mapped file whose name is a time, not an offset."""

    def __init__(self, path: Path, size: int, *, create: bool, readonly: bool) -> None:
        super().__init__(path, size, create=create, readonly=readonly, named_by_offset=False)
        self.wrote_position = size

    def flush(self) -> int:
        self.mm.flush()
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
        self, directory: Path, hash_slots: int, max_entries: int, clock: Clock, *, readonly: bool = False
    ) -> None:
        self.directory = directory
        self.hash_slots = hash_slots
        self.max_entries = max_entries
        self._clock = clock
        self.readonly = readonly
        self.files: list[IndexFile] = []
        self.last_store_timestamp = 0

    def load(self) -> None:
        if not self.directory.is_dir():
            return
        for path in sorted(p for p in self.directory.iterdir() if p.name.isdigit() and len(p.name) == 17):
            self.files.append(IndexFile(path, self.hash_slots, self.max_entries, readonly=self.readonly))

    @property
    def last_indexed_offset(self) -> int:
        """Commitlog offset of the newest indexed record, -1 if none."""
        if not self.files:
            return -1
        h = self.files[-1].header
        return h.end_phy_offset if h.index_count > 1 or h.end_phy_offset > 0 else -1

    def _writable_file(self) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full:
            return last
        end_phy = last.header.end_phy_offset if last else 0
        end_ts = last.header.end_timestamp if last else 0
        if last is not None:
            last.flush()  # a full file is final: make it durable before moving on
        ms = self._clock.now_ms()
        path = self.directory / index_file_name(ms)
        while path.exists() or (last is not None and path.name <= last.name):
            ms += 1
            path = self.directory / index_file_name(ms)
        f = IndexFile(
            path, self.hash_slots, self.max_entries, create=True, end_phy_offset=end_phy, end_timestamp=end_ts
        )
        self.files = [*self.files, f]
        return f

    def build_batch(self, batch: DispatchBatch) -> None:
        """Index the keys of a batch (nothing to do when no record has keys or a UNIQ_KEY)."""
        if any(k is not None for k in batch.uniq_keys) or any(batch.keys):
            self.build(batch.requests())

    def build(self, requests: Iterable[DispatchRequest]) -> None:
        """Index the keys of ``requests`` (in log order)."""
        f: IndexFile | None = None
        last_indexed = self.last_indexed_offset
        for req in requests:
            if (req.uniq_key is None and not req.keys) or req.physical_offset <= last_indexed:
                continue
            if f is None:
                f = self._writable_file()
            keys = [req.uniq_key] if req.uniq_key is not None else []
            if req.keys:
                keys.extend(k for k in req.keys.split(" ") if k)
            for k in keys:
                key = f"{req.topic}#{k}"
                while not f.put_key(key, req.physical_offset, req.store_timestamp):
                    f.write_header()
                    f = self._writable_file()
            self.last_store_timestamp = req.store_timestamp
        if f is not None:
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

    def truncate_after(self, offset: int) -> int | None:
        """Forget index entries of records at or past ``offset`` (the commitlog was cut there).

        Entries cannot be unlinked from hash chains, so a file holding entries on both sides of
        ``offset`` is deleted whole and the commitlog offset its entries started at is returned:
        the caller re-dispatches from there and nothing before ``offset`` stays unindexed.
        """
        rebuild_from = None
        keep = []
        for f in self.files:
            h = f.header
            if h.index_count <= 1 or h.end_phy_offset < offset:
                keep.append(f)
                continue
            if h.begin_phy_offset < offset:
                rebuild_from = h.begin_phy_offset
            log.info("deleting index file %s: it indexes records past commitlog offset %d", f.path, offset)
            f.destroy()
        self.files = keep
        return rebuild_from

    def flush(self) -> None:
        for f in self.files[-2:]:
            f.flush()

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []
