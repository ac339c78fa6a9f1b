"""ConsumeQueue: the per-(topic, queue) index of commitlog positions."""

from __future__ import annotations

import itertools
import logging
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rocketstore.codec.consume_queue_entry import (
    CQ_ENTRY_SIZE,
    PRE_BLANK_ENTRY,
    PRE_BLANK_SIZE,
    decode_entries,
    decode_entry,
    encode_entries,
    encode_entry,
    valid_prefix_length,
)
from rocketstore.dispatch_request import DispatchBatch, DispatchRequest
from rocketstore.errors import StorePathError
from rocketstore.message import TOPIC_PATTERN
from rocketstore.storage.map_cache import MapCache
from rocketstore.storage.mapped_file import MappedFile
from rocketstore.storage.mapped_file_queue import MappedFileQueue
from rocketstore.storage.paths import (
    DEFAULT_DIR_MODE,
    DEFAULT_FILE_MODE,
    list_store_dir,
    make_store_dir,
    parse_queue_id,
)

__all__ = ["ConsumeQueue", "ConsumeQueueSet", "queue_directories"]

log = logging.getLogger(__name__)


class ConsumeQueue:
    """Entries of one queue (STORE.md §4): queue offset N is the entry at byte N*20.

    Invariants: entries are appended strictly in queue-offset order; a dispatch of an offset
    already present is ignored; one that would leave a gap is logged and refused. A queue whose
    first segment starts past offset 0 (after expiry) has the space before its first entry
    filled with pre-blank entries (``fillPreBlank``). ``min_offset`` is the first entry that
    points at or after the commitlog's min offset.

    Thread safety: one writer (the dispatcher, or recovery before the store opens); readers
    read below ``max_offset`` without locks. Segments are mapped while used (``map_cache``):
    reads and writes mark the segment they touch as ``referenced``.
    """

    def __init__(
        self,
        topic: str,
        queue_id: int,
        directory: Path,
        entries_per_file: int,
        *,
        readonly: bool = False,
        file_mode: int = DEFAULT_FILE_MODE,
        map_cache: MapCache | None = None,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.files = MappedFileQueue(
            directory,
            entries_per_file * CQ_ENTRY_SIZE,
            readonly=readonly,
            file_mode=file_mode,
            map_cache=map_cache,
        )
        self.max_physical_offset = -1  # end (offset + size) of the last entry's record
        self.min_logic_offset = 0  # byte position of the first live entry
        # [first, end) queue offsets of invalid entries between valid ones, found by recover
        self.holes: list[tuple[int, int]] = []
        self.dropped: list[str] = []  # segments load found damaged and dropped, described

    def __repr__(self) -> str:
        return f"ConsumeQueue({self.topic}/{self.queue_id}, {self.min_offset}..{self.max_offset})"

    # --- offsets -------------------------------------------------------------------------
    @property
    def max_offset(self) -> int:
        """One past the last entry's queue offset."""
        return self.files.max_offset // CQ_ENTRY_SIZE

    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // CQ_ENTRY_SIZE

    # --- recovery ------------------------------------------------------------------------
    def load(self) -> None:
        """Open the queue's segments. One emptied or cut short, or after a gap, is dropped with
        every later one (``dropped`` says which; recovery re-dispatches what they held)."""
        self.dropped = self.files.load(rebuildable=True)
        for line in self.dropped:
            log.warning("%r: consume-queue segment %s dropped; rebuilt from the commitlog", self, line)
        self.min_logic_offset = self.files.min_offset

    def recover(self, from_physical: int | None = None) -> int:
        """Keep the entries up to the first invalid one (offset < 0 or size <= 0); cut the rest.

        Checked from the third-last segment, or (after a crash) from the segment holding the
        first entry at or after commitlog offset ``from_physical``: entries before it are known
        durable. Returns how many bytes of non-zero data were cut (a torn or damaged tail).

        Invalid entries followed by valid ones are not the end but holes (a zero-filled or
        damaged segment): ``holes`` lists them, the segments before the checked ones included,
        for re-dispatch to fill (``put``).
        """
        files = self.files.files
        self.holes = []
        if not files:
            return 0
        index = max(0, len(files) - 3)
        if from_physical is not None:
            index = min(index, self._segment_reaching(from_physical))
        for mf in files[:index]:
            self._find_holes(mf, decode_entries(mf.buf))
        end = files[index].from_offset
        i = index
        while i < len(files):
            mf = files[i]
            entries = decode_entries(mf.buf)
            valid = valid_prefix_length(entries)
            end = mf.from_offset + valid * CQ_ENTRY_SIZE
            if valid:
                last = entries[valid - 1]
                self.max_physical_offset = int(last["offset"]) + int(last["size"])
            del entries
            i += 1
            if valid < len(mf.buf) // CQ_ENTRY_SIZE:
                resume = self._resumes_at(i)
                if resume is None:
                    break
                self.holes.append((end // CQ_ENTRY_SIZE, files[resume].from_offset // CQ_ENTRY_SIZE))
                i = resume
        for first, stop in self.holes:
            log.warning(
                "%r: queue offsets %d..%d hold no valid entry but later ones do: a hole, rebuilt from the "
                "commitlog",
                self,
                first,
                stop - 1,
            )
        damaged = self._nonzero_bytes_from(end)
        if damaged:
            log.warning(
                "%r: cutting a damaged tail at queue offset %d (%d non-zero bytes after the last valid "
                "entry)",
                self,
                end // CQ_ENTRY_SIZE,
                damaged,
            )
        self.files.truncate(end)
        return damaged

    @property
    def may_lack_newest_segment(self) -> bool:
        """Whether the queue's newest segment may have been deleted: it has none left, or its
        last one is full (a queue only moves on to a new segment once the last is full). Rare in
        a healthy store (a queue that exactly fills its segment, a queue directory created just
        before a crash), and then costs a re-dispatch that finds nothing to add."""
        files = self.files.files
        return not files or files[-1].wrote_position >= files[-1].size

    def _find_holes(self, mf: MappedFile, entries: npt.NDArray[np.void]) -> None:
        """Runs of invalid entries in a segment that later segments follow (each one a hole)."""
        bad = (entries["offset"] < 0) | (entries["size"] <= 0)
        if not bad.any():
            return
        edges = np.flatnonzero(np.diff(np.concatenate(([0], bad.view(np.int8), [0]))))
        base = mf.from_offset // CQ_ENTRY_SIZE
        self.holes += [(base + int(a), base + int(b)) for a, b in edges.reshape(-1, 2)]

    def _resumes_at(self, i: int) -> int | None:
        """The first segment from ``i`` on that starts with a valid entry after the last valid
        one: the queue goes on there (a segment in between was zeroed or damaged)."""
        files = self.files.files
        for j in range(i, len(files)):
            offset, size, _ = decode_entry(files[j].buf, 0)
            if offset >= 0 and size > 0 and offset >= self.max_physical_offset:
                return j
        return None

    def _segment_reaching(self, physical: int) -> int:
        """Index of the segment from which entries may point at or after ``physical``: segments
        are skipped only while the next one starts with a valid entry older than it."""
        files = self.files.files
        for i in range(len(files) - 1):
            offset, size, _ = decode_entry(files[i + 1].buf, 0)
            if not (offset >= 0 and size > 0 and offset < physical):
                return i
        return max(0, len(files) - 1)

    def _nonzero_bytes_from(self, logic: int) -> int:
        """Non-zero bytes from queue position ``logic`` to the end of the last segment."""
        count = 0
        for mf in self.files.files:
            if mf.from_offset + len(mf.buf) <= logic:
                continue
            tail = np.frombuffer(mf.buf, dtype=np.uint8)[max(0, logic - mf.from_offset) :]
            count += int(np.count_nonzero(tail))
            del tail
        return count

    def truncate_after(self, physical_offset: int) -> int:
        """Drop entries pointing at or past ``physical_offset`` (the commitlog was cut there);
        returns how many were dropped."""
        files = self.files.files
        cut = None
        for mf in reversed(files):
            if mf.wrote_position < CQ_ENTRY_SIZE:
                continue  # a segment made for the next entry: it holds none, the one before may
            entries = decode_entries(mf.buf[: mf.wrote_position])
            offsets, sizes = entries["offset"].astype(np.int64), entries["size"].astype(np.int64)
            # a record that starts before the cut but reaches past it is gone too (pre-blank
            # entries, size Integer.MAX_VALUE, pad the start of a queue and stay)
            reaching_past = (offsets + sizes > physical_offset) & (sizes < PRE_BLANK_SIZE)
            beyond = np.flatnonzero((offsets >= physical_offset) | reaching_past)
            if len(beyond) == 0:
                break
            cut = mf.from_offset + int(beyond[0]) * CQ_ENTRY_SIZE
            del entries, beyond, offsets, sizes
            if cut > mf.from_offset:
                break
        if cut is None:
            return 0
        dropped = self.max_offset - cut // CQ_ENTRY_SIZE
        log.info(
            "%r: cutting %d entries from queue offset %d (they point past commitlog offset %d)",
            self,
            dropped,
            cut // CQ_ENTRY_SIZE,
            physical_offset,
        )
        self.files.truncate(cut)
        self.min_logic_offset = min(self.min_logic_offset, cut)
        last = self.entry_at(self.max_offset - 1) if self.max_offset > self.min_offset else None
        self.max_physical_offset = last[0] + last[1] if last else -1
        return dropped

    def correct_min_offset(self, commitlog_min_offset: int) -> None:
        """Move ``min_offset`` to the first entry whose record is still in the commitlog."""
        for mf in self.files.files:
            entries = decode_entries(mf.buf[: mf.wrote_position])
            live = np.flatnonzero(entries["offset"] >= commitlog_min_offset)
            del entries
            if len(live):
                self.min_logic_offset = max(
                    self.min_logic_offset, mf.from_offset + int(live[0]) * CQ_ENTRY_SIZE
                )
                return
        self.min_logic_offset = max(self.min_logic_offset, self.files.max_offset)

    def delete_expired(
        self, commitlog_min_offset: int, *, now_ms: int, forcibly_after_ms: int, pause: Callable[[], None]
    ) -> int:
        """After the commitlog lost its oldest segments: move ``min_offset`` past the entries that
        point below ``commitlog_min_offset``, then delete the segments holding only such entries
        (never the newest). Returns how many segments were deleted."""
        self.correct_min_offset(commitlog_min_offset)

        def expired(mf: MappedFile) -> bool:
            if mf.wrote_position < CQ_ENTRY_SIZE:
                return False
            last = decode_entry(mf.buf, mf.wrote_position - CQ_ENTRY_SIZE)
            return last[0] < commitlog_min_offset

        deleted = self.files.delete_oldest(
            expired, now_ms=now_ms, forcibly_after_ms=forcibly_after_ms, max_files=1 << 30, pause=pause
        )
        return len(deleted)

    # --- writing -------------------------------------------------------------------------
    def put(self, requests: Sequence[DispatchRequest]) -> None:
        """Append entries for ``requests`` (all of this queue, in queue-offset order)."""
        if not requests:
            return
        first, last = requests[0], requests[-1]
        # the usual run continues the queue exactly: every entry is written, encoded in one pass
        if last.queue_offset == first.queue_offset + len(requests) - 1 and self._put_encoded(
            first.queue_offset,
            memoryview(b"".join([encode_entry(r.physical_offset, r.size, r.tags_code) for r in requests])),
            first.physical_offset + first.size,
            last.physical_offset + last.size,
        ):
            return
        run: list[bytes] = []
        expected = self.max_offset
        refused: list[DispatchRequest] = []
        for req in requests:
            qo = req.queue_offset
            if qo < expected:
                if self.holes:
                    self._fill_hole(req)
                continue  # already present: dispatch is idempotent
            if req.physical_offset + req.size <= self.max_physical_offset:
                continue
            if qo > expected:
                if expected == 0 and not self.files.files:
                    self._fill_pre_blank(qo)
                    expected = qo
                else:
                    refused.append(req)
                    continue
            run.append(encode_entry(req.physical_offset, req.size, req.tags_code))
            self.max_physical_offset = req.physical_offset + req.size
            expected += 1
        self._write(b"".join(run))
        if refused:
            log.error(
                "%r: refused %d entries from queue offset %d (commitlog offset %d): the queue ends at %d "
                "and they would leave a gap",
                self,
                len(refused),
                refused[0].queue_offset,
                refused[0].physical_offset,
                expected,
            )

    def _fill_hole(self, req: DispatchRequest) -> None:
        """Write the entry of ``req`` if its place is a hole recovery found."""
        qo = req.queue_offset
        if not any(first <= qo < end for first, end in self.holes):
            return
        logic = qo * CQ_ENTRY_SIZE
        mf = self.files.find(logic)
        if mf is None:
            return
        pos = logic - mf.from_offset
        offset, size, _ = decode_entry(mf.buf, pos)
        if offset < 0 or size <= 0:
            mf.write_at(pos, encode_entry(req.physical_offset, req.size, req.tags_code))

    def put_columns(
        self,
        first_queue_offset: int,
        physical_offsets: npt.NDArray[np.int64],
        sizes: npt.NDArray[np.int64],
        tags_codes: npt.ArrayLike,
    ) -> bool:
        """Append consecutive entries starting at ``first_queue_offset`` in one write.

        Returns False, writing nothing, unless they continue the queue exactly (the caller then
        falls back to ``put``, which handles duplicates and gaps).
        """
        return self._put_encoded(
            first_queue_offset,
            memoryview(encode_entries(physical_offsets, sizes, tags_codes)),
            int(physical_offsets[0] + sizes[0]),
            int(physical_offsets[-1] + sizes[-1]),
        )

    def _put_encoded(
        self, first_queue_offset: int, entries: memoryview, first_end: int, last_end: int
    ) -> bool:
        """``put_columns`` of entries already encoded; ``first_end`` and ``last_end`` are where
        the first and the last record end in the commitlog."""
        if first_queue_offset != self.max_offset or first_end <= self.max_physical_offset:
            return False
        self._write(entries)
        self.max_physical_offset = last_end
        return True

    def _write(self, entries: bytes | memoryview) -> None:
        data = memoryview(entries)
        while data:
            mf = self.files.last_for_append(self.files.max_offset)
            mf.referenced = True
            n = min(len(data), mf.free_space)
            mf.write_at(mf.wrote_position, data[:n])
            mf.wrote_position += n
            data = data[n:]

    def _fill_pre_blank(self, queue_offset: int) -> None:
        """First entry past 0 in an empty queue: start the segment there, padding before it."""
        logic = queue_offset * CQ_ENTRY_SIZE
        mf = self.files.last_for_append(logic)
        pad = logic - mf.from_offset
        mf.write_at(0, PRE_BLANK_ENTRY * (pad // CQ_ENTRY_SIZE))
        mf.wrote_position = pad
        self.files.flushed_where = mf.from_offset
        self.min_logic_offset = logic

    # --- reading -------------------------------------------------------------------------
    def entry_at(self, offset: int) -> tuple[int, int, int] | None:
        """(commitlog offset, size, tagsCode) of queue offset ``offset``, or None."""
        logic = offset * CQ_ENTRY_SIZE
        mf = self.files.find(logic)
        if mf is None or offset < 0:
            return None
        mf.referenced = True
        buf = mf.buf  # before the availability check: see MappedFile.delete_when_unread
        pos = logic - mf.from_offset
        if not mf.available or pos + CQ_ENTRY_SIZE > mf.wrote_position:
            return None
        mf.check_intact(pos + CQ_ENTRY_SIZE)
        return decode_entry(buf, pos)

    def entries(self, offset: int, max_count: int) -> npt.NDArray[np.void] | None:
        """Up to ``max_count`` entries from ``offset``, within its segment (a zero-copy array)."""
        raw = self.entry_bytes(offset, max_count)
        return None if raw is None else decode_entries(raw)

    def entry_bytes(self, offset: int, max_count: int) -> memoryview | None:
        """``entries``' bytes as stored (a view of the segment), for compiled readers."""
        logic = offset * CQ_ENTRY_SIZE
        mf = self.files.find(logic)
        if mf is None:
            return None
        mf.referenced = True
        buf = mf.buf  # before the availability check: see MappedFile.delete_when_unread
        pos = logic - mf.from_offset
        end = min(mf.wrote_position, pos + max_count * CQ_ENTRY_SIZE)
        if not mf.available or pos >= end:
            return None
        mf.check_intact(end)
        return buf[pos:end]

    def next_segment_offset(self, offset: int) -> int:
        """The first queue offset of the segment after the one holding ``offset``."""
        return self.files.next_segment_start(offset * CQ_ENTRY_SIZE) // CQ_ENTRY_SIZE

    def offset_by_time(self, timestamp: int, store_time_of: Callable[[int], int]) -> int:
        """The first queue offset whose message was stored at or after ``timestamp``.

        Binary search over store times read from the commitlog (``store_time_of(phy)``);
        ``max_offset`` when every message is older.
        """
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            entry = self.entry_at(mid)
            ts = store_time_of(entry[0]) if entry is not None else -1
            if ts < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def close(self) -> None:
        self.files.close()


class ConsumeQueueSet:
    """Every consume queue of a store, by (topic, queue id); created on first dispatch. With a
    ``map_cache``, their segments are mapped only while used (see MapCache)."""

    def __init__(
        self,
        root: Path,
        entries_per_file: int,
        *,
        readonly: bool = False,
        file_mode: int = DEFAULT_FILE_MODE,
        dir_mode: int = DEFAULT_DIR_MODE,
        map_cache: MapCache | None = None,
    ) -> None:
        self.root = root
        self.entries_per_file = entries_per_file
        self.readonly = readonly
        self.file_mode = file_mode
        self.dir_mode = dir_mode
        self._map_cache = map_cache
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        # bumped whenever a queue is made or deleted (from 1: 0 is "not counted" to a follower)
        self.changes = 1

    def load(self) -> None:
        """Open every queue directory (see ``queue_directories``)."""
        for topic, queue_id, directory in queue_directories(self.root):
            cq = ConsumeQueue(
                topic,
                queue_id,
                directory,
                self.entries_per_file,
                readonly=self.readonly,
                file_mode=self.file_mode,
                map_cache=self._map_cache,
            )
            cq.load()
            self._queues[(cq.topic, cq.queue_id)] = cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue, created if needed; None (logged) for a topic that is not a safe name, which
        only a damaged record can carry: it must never become a directory."""
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            if not TOPIC_PATTERN.fullmatch(topic) or not 0 <= queue_id <= 0xFFFF:
                log.error(
                    "not dispatching a record of topic %r queue %d to a consume queue: not a valid name",
                    topic,
                    queue_id,
                )
                return None
            cq = ConsumeQueue(
                topic,
                queue_id,
                self.root / topic / str(queue_id),
                self.entries_per_file,
                readonly=self.readonly,
                file_mode=self.file_mode,
                map_cache=self._map_cache,
            )
            make_store_dir(cq.files.directory, self.dir_mode)
            self._queues = {**self._queues, (topic, queue_id): cq}
            self.changes += 1
        return cq

    def delete_topic(self, topic: str) -> int:
        """Close and delete every queue of ``topic`` with its directory (RocketMQ's
        cleanUnusedTopic); how many queues. No read of the topic may be in flight."""
        doomed = [cq for (t, _), cq in self._queues.items() if t == topic]
        self._queues = {k: cq for k, cq in self._queues.items() if k[0] != topic}
        self.changes += 1
        for cq in doomed:
            cq.close()
        if (self.root / topic).is_dir() and TOPIC_PATTERN.fullmatch(topic):
            shutil.rmtree(self.root / topic)
        return len(doomed)

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self._queues.values()))

    def __len__(self) -> int:
        return len(self._queues)

    def topics(self) -> dict[str, list[int]]:
        result: dict[str, list[int]] = {}
        for topic, qid in sorted(self._queues):
            result.setdefault(topic, []).append(qid)
        return result

    def physical_offsets_from(self, start: int) -> npt.NDArray[np.int64]:
        """Sorted commitlog offsets of every entry (of every queue) pointing at or after ``start``.
        Only entries of records count: a hole's zeros ("offset 0, size 0") and pre-blank padding
        point at no record, and would pass for the entry of the record at commitlog offset 0."""
        parts = []
        for cq in self._queues.values():
            for mf in reversed(cq.files.files):
                entries = decode_entries(mf.buf[: mf.wrote_position])
                offsets = entries["offset"].astype(np.int64)
                sizes = entries["size"]
                of_record = offsets[(offsets >= 0) & (sizes > 0) & (sizes < PRE_BLANK_SIZE)]
                parts.append(of_record[of_record >= start])
                del entries, sizes
                if len(of_record) and of_record[0] < start:
                    break
        # each part is sorted: the stable sort (timsort) merges the runs in near-linear time
        return np.sort(np.concatenate(parts), kind="stable") if parts else np.empty(0, dtype=np.int64)

    def max_physical_offset(self) -> int:
        return max((cq.max_physical_offset for cq in self._queues.values()), default=-1)

    def put(self, requests: Iterable[DispatchRequest]) -> None:
        """Append entries for ``requests`` (log order), grouped per queue."""
        by_queue: dict[tuple[str, int], list[DispatchRequest]] = {}
        for req in requests:
            key = (req.topic, req.queue_id)
            group = by_queue.get(key)
            if group is None:
                by_queue[key] = [req]
            else:
                group.append(req)
        for (topic, qid), group in by_queue.items():
            cq = self.get_or_create(topic, qid)
            if cq is not None:
                cq.put(group)

    def put_batch(self, batch: DispatchBatch) -> None:
        """Append a batch's entries: encoded in one pass, grouped by queue, one write per queue.
        PREPARED and ROLLBACK records get none."""
        rows, bounds = batch.queue_runs()
        if not len(rows):
            return
        phys, sizes = batch.physical_offsets[rows], batch.sizes[rows]
        ends = (phys + sizes).tolist()
        entries = memoryview(encode_entries(phys, sizes, batch.tags_codes[rows]))
        first_offsets = batch.queue_offsets[rows]
        requests: list[DispatchRequest] | None = None
        for start, end in itertools.pairwise(bounds):
            first = int(rows[start])
            cq = self.get_or_create(batch.topics[int(batch.topic_ids[first])], int(batch.queue_ids[first]))
            if cq is None:
                continue
            piece = entries[start * CQ_ENTRY_SIZE : end * CQ_ENTRY_SIZE]
            if not cq._put_encoded(int(first_offsets[start]), piece, ends[start], ends[end - 1]):
                requests = batch.requests() if requests is None else requests
                cq.put([requests[i] for i in rows[start:end].tolist()])

    def close(self) -> None:
        for cq in self._queues.values():
            cq.close()
        self._queues = {}


def queue_directories(root: Path) -> list[tuple[str, int, Path]]:
    """Every queue directory ``{topic}/{queueId}`` under ``root`` (``consumequeue/``), as
    (topic, queue id, path). Entries not named by a topic or a queue id are logged and left
    alone; a topic's or queue's name on something that is not a real directory is a
    StorePathError (dispatch could never write that queue)."""
    found = []
    for topic_dir in list_store_dir(root):
        if not TOPIC_PATTERN.fullmatch(topic_dir.name):
            log.warning("ignoring %s: not named by a topic", topic_dir.path)
            continue
        if not topic_dir.is_dir:
            raise StorePathError(topic_dir.path, "a topic directory", topic_dir.kind)
        for queue_dir in list_store_dir(topic_dir.path):
            queue_id = parse_queue_id(queue_dir.name)
            if queue_id is None:
                log.warning("ignoring %s: not named by a queue id", queue_dir.path)
                continue
            if not queue_dir.is_dir:
                raise StorePathError(queue_dir.path, "a queue directory", queue_dir.kind)
            found.append((topic_dir.name, queue_id, queue_dir.path))
    return found
