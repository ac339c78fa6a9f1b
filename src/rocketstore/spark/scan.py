"""Planning and reading a scan of a store directory: the work behind the Spark source, without Spark.

A scan reads files only, read-only mapped: no lock, no byte written, so it can run beside a live
writer (ours or RocketMQ's) and on every executor of a cluster that sees the directory.

Two ways through a store (the ``source`` option):

- ``commitlog``: every MESSAGE record in commitlog order. A segment is cut into byte ranges;
  each range starts at the first record start at or after its first byte, found by the same
  rule by whoever looks (``codec.commitlog_scan.range_starts``), so ranges planned on the driver
  and read on executors share out every record exactly once. The last segment is read up to
  where its valid records ended when the scan was planned.
- ``queues``: through the consume queues: only dispatched messages, in queue order, with the
  queue's offsets; a partition is a run of one queue.

``ScanBounds`` narrows a scan (options and pushed-down filters alike). Bounds prune segments,
queues and queue ranges when planning, and every row is then checked against them exactly, so
a bound never changes which rows come out, only how much is read.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rocketstore.codec.commitlog_scan import (
    range_starts,
    record_fields,
    scan_extent,
    store_timestamps,
    well_formed,
)
from rocketstore.codec.consume_queue_entry import CQ_ENTRY_SIZE, decode_entries
from rocketstore.config import StoreConfig
from rocketstore.consume_queue import queue_directories
from rocketstore.geometry import detect_geometry
from rocketstore.spark.columns import BodyAs, records_to_batch, text_column
from rocketstore.spark.options import QueueKey, is_system_topic
from rocketstore.storage.file_view import mapped_readonly
from rocketstore.storage.paths import StoreLayout, segment_files

__all__ = [
    "BATCH_ROWS",
    "CommitlogRange",
    "QueueRange",
    "ScanBounds",
    "ScanOptions",
    "StoreFiles",
    "plan_commitlog",
    "plan_queues",
    "read_commitlog_range",
    "read_queue_range",
]

log = logging.getLogger(__name__)

BATCH_ROWS = 8192  # rows per Arrow batch: the records it reads stay in the CPU caches while it is built
_MIN_SPLIT = 1 << 20  # never cut a segment into ranges smaller than this
_MAX_SPLIT = 128 << 20
_QUEUE_SPLIT = 1 << 20  # consume-queue entries per partition
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ScanBounds:
    """Which rows a scan keeps: each set, when given, must contain the row's value; each range is
    [low, high) (None: unbounded). Store times are in milliseconds."""

    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    queue_offset: tuple[int | None, int | None] = (None, None)
    physical_offset: tuple[int | None, int | None] = (None, None)
    store_time: tuple[int | None, int | None] = (None, None)
    empty: bool = False  # bounds that no row can meet (topic = 'a' AND topic = 'b')
    topic_pattern: str | None = None  # a regular expression the whole topic name matches
    system_topics: bool = True  # False: leave out SCHEDULE_TOPIC_XXXX, RMQ_SYS_*, %RETRY%*, %DLQ%*

    def topic_allowed(self, topic: str) -> bool:
        """Whether rows of ``topic`` can be kept."""
        if self.topics is not None and topic not in self.topics:
            return False
        if self.topic_pattern is not None and re.fullmatch(self.topic_pattern, topic) is None:
            return False
        return self.system_topics or not is_system_topic(topic)

    @property
    def by_row(self) -> bool:
        """Whether rows are checked one by one before their batch is built."""
        return dataclasses.replace(self, topic_pattern=None, system_topics=True) != ScanBounds()

    @property
    def by_topic_name(self) -> bool:
        """Whether rows are kept by what their topic's name looks like (checked on built batches:
        the distinct topics of a batch are few)."""
        return self.topic_pattern is not None or not self.system_topics

    def topic_mask(self, topics: pa.Array) -> pa.Array | None:
        """Which rows of a built batch the topic name rules keep; None when all of them."""
        distinct = pc.unique(topics).to_pylist()
        kept = [t for t in distinct if t is not None and self.topic_allowed(t)]
        if len(kept) == len(distinct):
            return None
        return pc.is_in(topics, value_set=pa.array(kept, type=pa.string()))

    def narrowed(self, **changes: object) -> ScanBounds:
        """These bounds and ``changes``: sets intersect, ranges shrink."""
        merged: dict[str, Any] = {}
        empty = self.empty
        for name, value in changes.items():
            mine = getattr(self, name)
            if isinstance(value, frozenset):
                both = value if mine is None else mine & value
                empty = empty or not both
                merged[name] = both
            elif isinstance(value, tuple):
                lo, hi = _max_opt(mine[0], value[0]), _min_opt(mine[1], value[1])
                empty = empty or (lo is not None and hi is not None and lo >= hi)
                merged[name] = (lo, hi)
            else:
                raise TypeError(f"cannot narrow {name} by {value!r}")
        return dataclasses.replace(self, empty=empty, **merged)

    def row_mask(
        self, fields: dict[str, I64], topics: pa.Array | None, queue_offsets: I64
    ) -> npt.NDArray[np.bool_]:
        n = len(queue_offsets)
        keep = np.ones(n, dtype=np.bool_)
        if self.empty:
            return ~keep
        if self.topics is not None and topics is not None:
            keep &= pc.is_in(topics, value_set=pa.array(sorted(self.topics), type=pa.string())).to_numpy(
                zero_copy_only=False
            )
        if self.queue_ids is not None:
            keep &= np.isin(fields["queue_id"], np.fromiter(self.queue_ids, dtype=np.int64))
        for (lo, hi), values in (
            (self.queue_offset, queue_offsets),
            (self.physical_offset, fields["physical_offset"]),
            (self.store_time, fields["store_timestamp"]),
        ):
            if lo is not None:
                keep &= values >= lo
            if hi is not None:
                keep &= values < hi
        return keep


def _max_opt(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min_opt(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


@dataclass(frozen=True)
class ScanOptions:
    include_body: bool = True
    body_as: BodyAs = "binary"
    bounds: ScanBounds = field(default_factory=ScanBounds)


@dataclass(frozen=True)
class StoreFiles:
    """Where a store's files are and the geometry they were written with."""

    root: str
    commitlog_segment_size: int
    consume_queue_entries: int

    @classmethod
    def at(cls, root: str | os.PathLike[str], config: StoreConfig | None = None) -> StoreFiles:
        """The store at ``root``, its geometry read from its files. Raises StoreConfigError."""
        cfg = detect_geometry(root, config, with_index=False)
        return cls(str(Path(root).resolve()), cfg.commitlog_segment_size, cfg.consume_queue_entries)

    @property
    def layout(self) -> StoreLayout:
        return StoreLayout(self.root)

    def segments(self) -> list[tuple[int, Path]]:
        """Commitlog segments as (log offset, path), oldest first."""
        return segment_files(self.layout.commitlog)

    def queues(self) -> list[tuple[str, int]]:
        """Every (topic, queue id) with a queue directory (``consume_queue.queue_directories``:
        the rule the store loads its queues by)."""
        return [(topic, queue_id) for topic, queue_id, _ in queue_directories(self.layout.consume_queue)]

    def queue_files(self, topic: str, queue_id: int) -> list[tuple[int, Path]]:
        """A queue's files as (first queue offset, path)."""
        return [
            (start // CQ_ENTRY_SIZE, p)
            for start, p in segment_files(self.layout.consume_queue / topic / str(queue_id))
        ]


# --- the commitlog path ---------------------------------------------------------------------
@dataclass(frozen=True)
class CommitlogRange:
    """Records of one segment whose starts fall in [begin, end) (positions in the segment),
    the segment's data ending at ``limit`` for this scan."""

    path: str
    seg_start: int
    begin: int
    end: int
    limit: int


def _store_time(view: memoryview, pos: int) -> int | None:
    """STORETIMESTAMP of the record at ``pos`` of a segment, or None when no whole MESSAGE record
    starts there."""
    if pos + 8 > len(view):
        return None
    at = np.array([pos], dtype=np.int64)
    size = np.array([int.from_bytes(view[pos : pos + 4], "big", signed=True)], dtype=np.int64)
    if not well_formed(view, at, size)[0]:
        return None
    return int(store_timestamps(view, at)[0])


def plan_commitlog(files: StoreFiles, bounds: ScanBounds, min_partitions: int) -> list[CommitlogRange]:
    """Byte ranges covering the segments the bounds can reach, enough to keep
    ``min_partitions`` tasks busy, none over 128 MiB."""
    if bounds.empty:
        return []
    segments = files.segments()
    if not segments:
        return []
    phys_lo, phys_hi = bounds.physical_offset
    spans: list[tuple[int, Path, int, int]] = []  # (seg start, path, begin, limit)
    for i, (start, path) in enumerate(segments):
        size = path.lstat().st_size
        if phys_hi is not None and start >= phys_hi:
            break
        if phys_lo is not None and start + size <= phys_lo:
            continue
        limit = size
        if i == len(segments) - 1:
            # the segment a writer may be appending to: read what was whole when planned
            with mapped_readonly(path) as view:
                limit = scan_extent(view).position
        begin = max(0, phys_lo - start) if phys_lo is not None else 0
        spans.append((start, path, begin, limit))
    spans = _prune_by_time(spans, bounds.store_time)
    total = sum(limit - begin for _, _, begin, limit in spans)
    if not total:
        return []
    split = min(_MAX_SPLIT, max(_MIN_SPLIT, math.ceil(total / max(1, min_partitions))))
    ranges = []
    for start, path, begin, limit in spans:
        end_at = limit
        if phys_hi is not None:
            end_at = min(limit, phys_hi - start)
        cuts = list(range(begin, end_at, split)) or [begin]
        for k, a in enumerate(cuts):
            b = cuts[k + 1] if k + 1 < len(cuts) else (end_at if end_at < limit else limit)
            ranges.append(CommitlogRange(str(path), start, a, b, limit))
    return ranges


def _prune_by_time(
    spans: list[tuple[int, Path, int, int]], window: tuple[int | None, int | None]
) -> list[tuple[int, Path, int, int]]:
    """Drop segments wholly outside the store-time window, judged by each segment's first store
    time; only when those times rise from segment to segment (store times are taken under the
    append lock, so they do, unless the clock was set back)."""
    lo, hi = window
    if (lo is None and hi is None) or len(spans) < 2:
        return spans
    firsts = []
    for _, path, _, _ in spans:
        with mapped_readonly(path) as view:
            firsts.append(_store_time(view, 0))  # every segment starts with a record
    if any(t is None for t in firsts) or any(b < a for a, b in itertools.pairwise(firsts)):  # type: ignore[operator]
        return spans
    kept = []
    for i, span in enumerate(spans):
        first = firsts[i]
        nxt = firsts[i + 1] if i + 1 < len(firsts) else None
        if hi is not None and first is not None and first >= hi:
            break
        if lo is not None and nxt is not None and nxt < lo:
            continue  # every record here is older than the next segment's first
        kept.append(span)
    return kept


def read_commitlog_range(part: CommitlogRange, options: ScanOptions) -> Iterator[pa.RecordBatch]:
    """The records of one planned range, as record batches of the source's schema."""
    path = Path(part.path)
    try:
        cm = mapped_readonly(path)
        view = cm.__enter__()
    except FileNotFoundError:
        log.warning(
            "commitlog segment %s was reclaimed before it could be read; its records are skipped", path
        )
        return
    try:
        starts, damaged = range_starts(view, part.begin, part.end, part.limit, part.seg_start)
        for a, b in damaged:
            log.warning(
                "commitlog %s: %d damaged bytes at %d skipped (records resume at %d)",
                path.name,
                b - a,
                part.seg_start + a,
                part.seg_start + b,
            )
        for k in range(0, len(starts), BATCH_ROWS):
            chunk = starts[k : k + BATCH_ROWS]
            chunk = _kept(view, chunk, None, options.bounds)
            if len(chunk):
                yield from _by_topic_name(
                    records_to_batch(view, chunk, include_body=options.include_body, body_as=options.body_as),
                    options.bounds,
                )
            del chunk
        del starts
    finally:
        cm.__exit__(None, None, None)


def _by_topic_name(batch: pa.RecordBatch, bounds: ScanBounds) -> Iterator[pa.RecordBatch]:
    mask = bounds.topic_mask(batch.column(0)) if bounds.by_topic_name else None
    if mask is None:
        yield batch
    elif pc.any(mask).as_py():
        yield batch.filter(mask)


def _kept(view: memoryview, starts: I64, queue_offsets: I64 | None, bounds: ScanBounds) -> I64:
    """The starts whose records meet the bounds (all of them when there are none)."""
    if not bounds.by_row or not len(starts):
        return starts
    fields = record_fields(view, starts)
    topics = text_column(view, fields["topic_at"], fields["topic_len"]) if bounds.topics is not None else None
    qo = fields["queue_offset"] if queue_offsets is None else queue_offsets
    return starts[bounds.row_mask(fields, topics, qo)]


# --- the consume-queue path -----------------------------------------------------------------
@dataclass(frozen=True)
class QueueRange:
    """Queue offsets [start, end) of one consume queue."""

    topic: str
    queue_id: int
    start: int
    end: int


def queue_extent(files: StoreFiles, topic: str, queue_id: int) -> tuple[int, int]:
    """(min, max) queue offsets of a queue: its first entry still pointing into the commitlog,
    and one past its last valid entry."""
    qfiles = files.queue_files(topic, queue_id)
    if not qfiles:
        return 0, 0
    segments = files.segments()
    log_min = segments[0][0] if segments else 0
    first_offset, last_path = qfiles[-1]
    with mapped_readonly(last_path) as view:
        entries = decode_entries(view[: len(view) - len(view) % CQ_ENTRY_SIZE])
        valid = _valid_prefix(entries)
        del entries
    max_offset = first_offset + valid
    min_offset = qfiles[0][0]
    # skip pre-blank entries and entries whose records were reclaimed (RocketMQ's correctMinOffset)
    for start, path in qfiles:
        with mapped_readonly(path) as view:
            entries = decode_entries(view[: len(view) - len(view) % CQ_ENTRY_SIZE])
            live = np.flatnonzero((entries["offset"] >= log_min) & (entries["size"] > 0))
            del entries
        if len(live):
            min_offset = start + int(live[0])
            break
        min_offset = start + files.consume_queue_entries
    return min(min_offset, max_offset), max_offset


def _valid_prefix(entries: npt.NDArray[np.void]) -> int:
    bad = np.flatnonzero((entries["offset"] < 0) | (entries["size"] <= 0))
    return int(bad[0]) if len(bad) else len(entries)


def queue_offset_by_time(files: StoreFiles, topic: str, queue_id: int, timestamp: int) -> int:
    """The first queue offset whose message was stored at or after ``timestamp`` (ms), by binary
    search as RocketMQ's getOffsetInQueueByTime; the max offset when every message is older."""
    lo, hi = queue_extent(files, topic, queue_id)
    while lo < hi:
        mid = (lo + hi) // 2
        phys = _queue_entries(files, topic, queue_id, mid, mid + 1)[0]
        ts = _store_time_at(files, int(phys[0])) if len(phys) else -1
        if ts < timestamp:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _store_time_at(files: StoreFiles, physical: int) -> int:
    seg = physical - physical % files.commitlog_segment_size
    try:
        with mapped_readonly(files.layout.commitlog / f"{seg:020d}") as view:
            found = _store_time(view, physical - seg)
    except FileNotFoundError:
        return -1
    return -1 if found is None else found


def _queue_entries(files: StoreFiles, topic: str, queue_id: int, start: int, end: int) -> tuple[I64, I64]:
    """(physical offsets, sizes) of queue offsets [start, end)."""
    per_file = files.consume_queue_entries
    phys: list[I64] = []
    sizes: list[I64] = []
    for first, path in files.queue_files(topic, queue_id):
        lo, hi = max(start, first), min(end, first + per_file)
        if lo >= hi:
            continue
        try:
            with mapped_readonly(path) as view:
                entries = decode_entries(view[(lo - first) * CQ_ENTRY_SIZE : (hi - first) * CQ_ENTRY_SIZE])
                phys.append(entries["offset"].astype(np.int64))
                sizes.append(entries["size"].astype(np.int64))
                del entries
        except FileNotFoundError:
            continue
    if not phys:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return np.concatenate(phys), np.concatenate(sizes)


def plan_queues(
    files: StoreFiles, bounds: ScanBounds, limits: Mapping[QueueKey, tuple[int, int]] | None = None
) -> list[QueueRange]:
    """Runs of the queues the bounds can reach, at most a million entries each. ``limits``,
    when given, names the only queues read and the offsets [start, end) read of each."""
    if bounds.empty:
        return []
    ranges: list[QueueRange] = []
    qo_lo, qo_hi = bounds.queue_offset
    t_lo, t_hi = bounds.store_time
    for topic, qid in files.queues():
        if not bounds.topic_allowed(topic):
            continue
        if bounds.queue_ids is not None and qid not in bounds.queue_ids:
            continue
        if limits is not None and (topic, qid) not in limits:
            continue
        lo, hi = limits[(topic, qid)] if limits is not None else queue_extent(files, topic, qid)
        if qo_lo is not None:
            lo = max(lo, qo_lo)
        if qo_hi is not None:
            hi = min(hi, qo_hi)
        if t_lo is not None and lo < hi:
            lo = max(lo, queue_offset_by_time(files, topic, qid, t_lo))
        if t_hi is not None and lo < hi:
            hi = min(hi, queue_offset_by_time(files, topic, qid, t_hi) + 1)
        ranges.extend(
            QueueRange(topic, qid, a, min(hi, a + _QUEUE_SPLIT)) for a in range(lo, hi, _QUEUE_SPLIT)
        )
    return ranges


def read_queue_range(files: StoreFiles, part: QueueRange, options: ScanOptions) -> Iterator[pa.RecordBatch]:
    """The messages of one queue run in queue order. An entry whose record is gone (reclaimed) or
    is not the record it names (damage) is skipped with a warning."""
    for a in range(part.start, part.end, BATCH_ROWS):
        b = min(part.end, a + BATCH_ROWS)
        phys, sizes = _queue_entries(files, part.topic, part.queue_id, a, b)
        offsets = np.arange(a, a + len(phys), dtype=np.int64)
        seg_size = files.commitlog_segment_size
        seg_of = phys - phys % seg_size
        # a queue's records lie in rising commitlog order: one run per segment
        cuts = np.flatnonzero(np.diff(seg_of)) + 1
        for run in np.split(np.arange(len(phys)), cuts):
            if not len(run):
                continue
            seg = int(seg_of[run[0]])
            path = files.layout.commitlog / f"{seg:020d}"
            try:
                cm = mapped_readonly(path)
                view = cm.__enter__()
            except FileNotFoundError:
                log.warning(
                    "%s/%d: queue offsets %d..%d point into a reclaimed segment; skipped",
                    part.topic,
                    part.queue_id,
                    int(offsets[run[0]]),
                    int(offsets[run[-1]]),
                )
                continue
            try:
                pos = phys[run] - seg
                ok = well_formed(view, pos, sizes[run])
                if not ok.all():
                    log.warning(
                        "%s/%d: %d consume-queue entries do not point at their records; skipped",
                        part.topic,
                        part.queue_id,
                        int((~ok).sum()),
                    )
                pos, qo = pos[ok], offsets[run][ok]
                if options.bounds.by_row:
                    fields = record_fields(view, pos)
                    keep = options.bounds.row_mask(fields, None, qo)
                    pos, qo = pos[keep], qo[keep]
                if len(pos):
                    yield records_to_batch(
                        view,
                        pos,
                        include_body=options.include_body,
                        body_as=options.body_as,
                        queue_offsets=qo,
                    )
                del pos
            finally:
                cm.__exit__(None, None, None)
