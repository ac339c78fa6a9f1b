"""Store maintenance on Spark: ``verify`` a store and ``rebuild`` its consume queues and index,
with the work spread over Spark tasks. Both read the store through paths, so every executor must
see the store directory (one machine, or a shared file system).

verify(spark, store) -> VerifyReport
    The checks and the report of ``rocketstore.verify.verify_store``, computed by the same
    functions, only elsewhere:

    - driver: lists the files (stray and misnamed files are reported here) and reads the
      geometry;
    - stage 1, a job per consume queue and one per index file, shared out over a few Spark tasks
      per core (a Spark task costs more than checking a small file): ``verify.queues.read_queue`` /
      ``verify.index_files.read_index_file`` check the files on their own and return the pointers into the
      commitlog they hold (numpy columns), their damage and their counts;
    - driver: numbers the queues and files in the order ``verify_store`` does, merges the
      pointers and sorts them by commitlog offset (the same stable sort), and broadcasts the
      queue names and file names;
    - stage 2, a job per commitlog segment, shared out the same way: ``verify.segments.check_segment``
      scans the segment and checks the pointers into it (the driver sends each job only its
      slice of them);
    - driver: ``verify.segments.finish_commitlog`` (segments ending in zero fill before later data,
      pointers no segment covers, the commitlog range) and the checkpoint's size.

    Damage is listed up to ``MAX_DAMAGE_PER_FILE`` per file, and which ones are listed depends on
    the order they were found. Every file's damage comes from tasks the driver merges in the
    order ``verify_store`` visits them (the queue or index task first, then the segment tasks in
    log order, then the driver's last checks), and each task hands back, per file, what it listed
    plus its first unlisted damage and its count (``DamageLog.per_file`` / ``absorb``): the merged
    report is ``verify_store``'s, field by field. Tasks open every file read-only; only paths,
    offsets, pointer columns, damage lists and counts travel between driver and tasks.

rebuild(spark, store, config=None) -> dict[str, int]
    New ``consumequeue/`` and ``index/`` from the commitlog, byte-identical to what the store's own
    dispatch (``DispatchService``) writes for the same log:

    - driver: takes the store's lock (a store open in a live process is refused:
      StoreLockedError), reads the geometry, creates a staging directory ``.rebuild`` inside the
      store root (same file system: the swap is a rename);
    - stage 1, a job per segment (a few Spark tasks per core): the records from byte 0 to the end
      of the valid data (``scan_extent``, CRC checked as recovery does) are read in columns
      (``dispatch_columns.dispatch_batch``: one compiled pass, no Python object per record)
      into a ``DispatchBatch``, with the rules of the store's own dispatch (tagsCode, delivery
      time in SCHEDULE_TOPIC_XXXX, KEYS and UNIQ_KEY; a replica's dispatch uses the same pass);
      the task hashes the keys for the index there and then (``index.batch_key_hashes``, one
      compiled pass) and saves two parts in ``.rebuild/parts/``: the queue entries grouped by
      queue (leaving out PREPARED and ROLLBACK records, as dispatch does) and the index keys.
      The driver gets each segment's extent and decides where the log ends, as recovery and
      dispatch do: at the first segment that does not end in a BLANK record;
    - stage 2, a job per consume queue and one per index file, shared out by size over a few
      Spark tasks per core: a queue's job reads its rows of every segment's part up to the log's
      end, in commitlog order, which is queue order, and writes them with
      ``ConsumeQueue.put_columns`` (``put`` when a queue does not start at 0 or has holes); an
      index file's job writes its ``index_max_entries - 1`` keys (the driver cuts the key parts
      into files and names each file, see below) with ``IndexFile.put_keys``, the writer
      dispatch uses, the header begun from the end of the file before it, as ``IndexService``
      begins it. The writers own the file formats: nothing here packs a byte. Nothing large
      travels through Spark: the parts go from stage 1 to stage 2 through the staging directory
      (the executors see the store anyway), and only their row counts through the driver;
    - driver: the staged files are synced, then ``consumequeue/`` and ``index/`` are swapped in,
      each in one atomic step (Linux's ``renameat2(RENAME_EXCHANGE)``; elsewhere two renames),
      the old ones kept until both new ones are in place (a failed swap puts the first one
      back: the store is left as it was), then deleted with the staging directory; the
      checkpoint's logics and index times become the store time of the last record dispatched,
      so the next open neither trusts more than was rebuilt nor throws index files away.

    Why byte-identical: the files are written by the store's own writers, fed the same entries
    in the same order. Each queue's entries come from the same records, with the same dispatch
    information, in commitlog order, as dispatch feeds them; how dispatch splits them into
    rounds does not change the bytes (a queue entry is 20 bytes at its offset's place; the index
    writer's bytes are those of one putKey per key, whatever the rounds: tests/test_index_compat),
    and neither does writing each index file on its own: a file's bytes depend only on its keys
    and on the last key of the file before it, which the driver hands it.

    A crash in the middle: before the swaps the store is untouched (the next rebuild deletes the
    staging directory); between them it has the new queues and the old index, which open as
    they are; without an atomic exchange, a crash between the two renames of one directory
    leaves it missing (the next open re-dispatches missing queues, not a missing index: run the
    rebuild again); before the checkpoint is rewritten its times are the old ones, which at
    worst make the next open re-dispatch more than it needs to.

    Index file names. The store names an index file by the wall-clock time it creates it, so no
    rebuild can reproduce names from the past. Here the file is named (by ``new_index_path``,
    the rule ``IndexService`` names new files by) by the store time of the first record whose
    keys it holds, one millisecond later while that name is not after the previous one's.
    That is exactly the name the store gives when its clock reads a record's store time while
    dispatching it (a ``ManualClock`` held still between putting and dispatching), which is how
    the tests compare names; against a store written in real time the names differ by the
    dispatch delay, and the contents are compared file by file in order.

    Geometry: ``config`` (segment sizes, index slots and entries, delay levels, CRC on recovery);
    None reads it from the files, which needs a consume-queue file and an index file to learn
    those sizes from (without them RocketMQ's defaults are used).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import logging
import os
import shutil
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from rocketstore.checkpoint import StoreCheckpoint
from rocketstore.codec.checkpoint import Checkpoint
from rocketstore.codec.commitlog_scan import message_starts, scan_extent
from rocketstore.config import StoreConfig
from rocketstore.consume_queue import ConsumeQueueSet
from rocketstore.dispatch_columns import dispatch_batch
from rocketstore.dispatch_request import DispatchRequest
from rocketstore.errors import CorruptDataError, RocketStoreError, StoreLockedError
from rocketstore.geometry import survey_geometry
from rocketstore.index import IndexFile, batch_key_hashes, new_index_path
from rocketstore.storage.file_view import mapped_readonly
from rocketstore.storage.paths import (
    StoreLayout,
    fsync_directory,
    make_store_dir,
    segment_files,
    store_dir_exists,
)
from rocketstore.store_lock import StoreLock
from rocketstore.verify.index_files import (
    IndexCover,
    find_index_files,
    index_cover,
    new_index_refs,
    read_index_file,
)
from rocketstore.verify.listing import store_relative
from rocketstore.verify.metadata import check_checkpoint, check_config_dir, geometry
from rocketstore.verify.pointers import PointerCheck
from rocketstore.verify.queues import Queues, find_queues, new_queue_refs, read_queue
from rocketstore.verify.refs import Refs
from rocketstore.verify.report import Damage, DamageLog, VerifyReport
from rocketstore.verify.segments import (
    Segment,
    check_missing_segment,
    check_segment,
    commitlog_segments,
    finish_commitlog,
)

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

__all__ = ["STAGING_DIR", "RebuildError", "rebuild", "verify"]

log = logging.getLogger(__name__)

_TASKS_PER_CORE: Final = 2
STAGING_DIR: Final = ".rebuild"  # in the store root, beside consumequeue/ and index/
I64 = npt.NDArray[np.int64]
Columns = dict[str, npt.NDArray[Any]]
PerFile = dict[str, tuple[list[Damage], int]]


class RebuildError(RocketStoreError):
    """The consume queues and index could not be rebuilt (the store is left as it was)."""


# === verify ===================================================================================
@dataclass(frozen=True)
class _ReadJob:
    """Stage 1 of verify: one queue (its directory and files) or one index file."""

    kind: str  # "queue" or "index"
    path: Path  # the queue directory, or the index file
    files: tuple[tuple[int, Path], ...] = ()


@dataclass(frozen=True)
class _ReadResult:
    checked: int  # entries checked
    files: list[str]  # files read, in order (the pointers' "file" column numbers them from 0)
    refs: Columns  # pointers into the commitlog, sorted by offset
    damage: PerFile


@dataclass(frozen=True)
class _Meta:
    """What every segment task needs to name and check what the pointers point from."""

    topics: list[str]
    queue_ids: list[int]
    queue_files: list[str]
    index_files: list[str]
    index_cover: IndexCover


@dataclass(frozen=True)
class _SegmentJob:
    seg: Segment
    seg_size: int
    check_crc: bool
    being_written: bool
    queue_refs: Columns  # the pointers into this segment
    index_refs: Columns


def verify(
    spark: SparkSession, store: str, config: StoreConfig | None = None, *, check_crc: bool = True
) -> VerifyReport:
    """``verify_store(store, config, check_crc=check_crc)`` with the work on Spark tasks (see the
    module docstring): the same report. Changes nothing."""
    paths = StoreLayout(store)
    paths.require_store()
    cfg = geometry(paths, config)
    sc = spark.sparkContext
    damage = DamageLog()
    found = find_queues(paths, damage)
    index_paths = find_index_files(paths, damage)
    cover = index_cover(paths, cfg, damage)  # before the entries: a writer updates headers last

    jobs = [_ReadJob("queue", queue_dir, tuple(files)) for _, _, queue_dir, files in found]
    jobs += [_ReadJob("index", p) for p in index_paths]
    results: list[_ReadResult] = _run(sc, jobs, partial(_read_task, str(paths.root), cfg))
    queues = Queues()
    queue_refs, index_refs = new_queue_refs(), new_index_refs()
    index_names: list[str] = []
    queue_entries = index_entries = 0
    for job, res in zip(jobs, results):
        damage.absorb(res.damage)
        cols = dict(res.refs)
        if job.kind == "queue":
            topic, queue_id, _, _ = found[len(queues.topics)]
            cols["queue"] = np.full(len(cols["phy"]), len(queues.topics), dtype=np.int32)
            cols["file"] = cols["file"] + len(queues.files)
            queues.topics.append(topic)
            queues.queue_ids.append(queue_id)
            queues.files += res.files
            queue_refs.add(**cols)
            queue_entries += res.checked
        else:
            cols["file"] = cols["file"] + len(index_names)
            index_names += res.files
            index_refs.add(**cols)
            index_entries += res.checked
    queue_refs.seal()
    index_refs.seal()
    cover = cover.quieting(damage)

    seg_size = cfg.commitlog_segment_size
    segments = commitlog_segments(paths, cfg, damage)
    meta = sc.broadcast(_Meta(queues.topics, queues.queue_ids, queues.files, index_names, cover))
    seg_jobs = []
    for i, seg in enumerate(segments):
        check_missing_segment(paths, segments, i, seg_size, damage)
        seg_jobs.append(
            _SegmentJob(
                seg,
                seg_size,
                check_crc,
                i >= len(segments) - 2,
                _slice(queue_refs, seg.start, seg_size),
                _slice(index_refs, seg.start, seg_size),
            )
        )
    scanned: list[tuple[Segment, PerFile]] = _run(sc, seg_jobs, partial(_segment_task, meta))
    meta.destroy()
    checker = PointerCheck(queues, queue_refs, index_names, index_refs, damage)
    for i, (seg, part) in enumerate(scanned):
        damage.absorb(part)
        segments[i] = seg
        checker.skip(seg.start, seg.start + seg_size)  # the segment's task checked these
    records, commitlog_range = finish_commitlog(segments, seg_size, check_crc, checker, damage)
    check_checkpoint(paths, damage)
    check_config_dir(paths, damage)
    return VerifyReport(damage.result(), records, queue_entries, index_entries, commitlog_range)


def _run(sc: Any, jobs: list[Any], task: Any) -> list[Any]:
    """``task(job)`` for every job, results in the jobs' order. Jobs are shared out over a few
    Spark tasks per core: a Spark task costs far more than a small job."""
    if not jobs:
        return []
    rdd: RDD[Any] = sc.parallelize(jobs, min(len(jobs), _TASKS_PER_CORE * max(1, sc.defaultParallelism)))
    return rdd.map(task).collect()


def _slice(refs: Refs, start: int, size: int) -> Columns:
    span = refs.span(start, start + size)
    return {name: col[span] for name, col in refs.cols.items()}


def _read_task(root: str, cfg: StoreConfig, job: _ReadJob) -> _ReadResult:
    """Stage 1 of verify, on an executor: one queue's files or one index file."""
    paths = StoreLayout(root)
    damage = DamageLog()
    names: list[str] = []
    if job.kind == "queue":
        refs = new_queue_refs()
        queues = Queues()
        checked = read_queue(paths, cfg, job.path, list(job.files), 0, queues, refs, damage)
        names = queues.files
    else:
        refs = new_index_refs()
        checked = 0
        with contextlib.suppress(FileNotFoundError):  # reclaimed while we looked
            checked = read_index_file(job.path, store_relative(paths, job.path), cfg, names, refs, damage)
    refs.seal()
    return _ReadResult(checked, names, refs.cols, damage.per_file())


def _segment_task(meta: Any, job: _SegmentJob) -> tuple[Segment, PerFile]:
    """Stage 2 of verify, on an executor: scan one segment, check the pointers into it."""
    m: _Meta = meta.value  # a Broadcast[_Meta]
    damage = DamageLog()
    queue_refs, index_refs = new_queue_refs(), new_index_refs()
    for refs, cols in ((queue_refs, job.queue_refs), (index_refs, job.index_refs)):
        refs.cols = cols
        refs.done = np.zeros(len(cols["phy"]), dtype=bool)
    queues = Queues(m.topics, m.queue_ids, m.queue_files)
    checker = PointerCheck(queues, queue_refs, m.index_files, index_refs, damage, m.index_cover)
    check_segment(job.seg, job.seg_size, job.check_crc, checker, damage, being_written=job.being_written)
    return job.seg, damage.per_file()


# === rebuild ==================================================================================
@dataclass(frozen=True)
class _Parsed:
    """What stage 1 of rebuild tells the driver about one segment; its columns are in the
    staging directory's ``parts/`` (see ``_parse_task``)."""

    start: int  # the segment's commitlog offset
    records: int
    end: int  # commitlog offset just past the last record decoded
    closed: bool  # the records end in a BLANK record: the log goes on in the next segment
    last_store_timestamp: int  # of the last record, 0 when none
    reason: str | None  # why the records end early, when they do (damage)
    queues: tuple[tuple[str, int, int, int], ...] = ()  # (topic, queue id, rows [lo, hi) of the queue part)
    keys: int = 0  # rows of the key part


@dataclass(frozen=True)
class _QueueJob:
    """Stage 2 of rebuild: one consume queue, from its rows in each segment's queue part."""

    topic: str
    queue_id: int
    parts: tuple[tuple[int, int, int], ...]  # (segment start, first row, end row), in log order

    @property
    def weight(self) -> int:
        return sum(hi - lo for _, lo, hi in self.parts)


@dataclass(frozen=True)
class _IndexJob:
    """Stage 2 of rebuild: one index file, from its rows of the segments' key parts."""

    name: str
    end_phy_offset: int  # the previous file's last entry (0 for the first file): the new file's header
    end_timestamp: int
    parts: tuple[tuple[int, int, int], ...]

    @property
    def weight(self) -> int:
        return sum(hi - lo for _, lo, hi in self.parts)


def rebuild(spark: SparkSession, store: str, config: StoreConfig | None = None) -> dict[str, int]:
    """Rebuild ``consumequeue/`` and ``index/`` of the closed store at ``store`` from its commitlog
    (see the module docstring). Returns counts: segments and records read, queues and queue
    entries written, index files and index entries written, and ``log_end``, the commitlog
    offset the rebuild stopped at. Raises StoreLockedError when the store is open."""
    paths = StoreLayout(store)
    if not store_dir_exists(paths.commitlog):
        raise FileNotFoundError(f"no commitlog directory in {str(paths.root)!r}")
    lock = StoreLock(paths.lock)
    try:
        lock.acquire()
    except StoreLockedError as exc:
        raise StoreLockedError(
            str(paths.root), f"close it before rebuilding its consume queues and index ({exc})"
        ) from None
    try:
        cfg = config if config is not None else survey_geometry(paths.root)[0]
        staging = paths.root / STAGING_DIR
        shutil.rmtree(staging, ignore_errors=True)  # what an interrupted rebuild left
        make_store_dir(staging / "consumequeue", cfg.dir_mode)
        make_store_dir(staging / "index", cfg.dir_mode)
        try:
            summary = _rebuild_into(spark, paths, cfg, staging)
            _swap_in(paths, staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        shutil.rmtree(staging, ignore_errors=True)
        if summary["records"]:
            _rewrite_checkpoint(paths, summary.pop("last_store_timestamp"))
        else:
            summary.pop("last_store_timestamp")
        return summary
    finally:
        lock.release()


def _rebuild_into(spark: SparkSession, paths: StoreLayout, cfg: StoreConfig, staging: Path) -> dict[str, int]:
    """Stages 1 and 2 of rebuild: the new files in ``staging``; their counts."""
    sc = spark.sparkContext
    seg_size = cfg.commitlog_segment_size
    if not store_dir_exists(paths.commitlog):
        raise RebuildError(f"{str(paths.root)!r} has no commitlog directory: nothing to rebuild from")
    starts = [start for start, _ in segment_files(paths.commitlog)]
    if any(s % seg_size for s in starts) or any(b - a != seg_size for a, b in itertools.pairwise(starts)):
        raise RebuildError(
            f"the commitlog of {str(paths.root)!r} is not a run of contiguous {seg_size}-byte segments "
            "(see `rocketstore verify`): the store would not open, nothing to rebuild from"
        )
    parts = staging / "parts"
    make_store_dir(parts, cfg.dir_mode)
    parse = partial(
        _parse_task, str(paths.commitlog), str(parts), seg_size, cfg.check_crc_on_recover, cfg.delay_levels_ms
    )
    parsed: list[_Parsed] = _run(sc, starts, parse)
    log_end, used, records, last_ts = _log_end(parsed, paths)
    jobs: list[_QueueJob | _IndexJob] = [*_index_jobs(parts, staging / "index", cfg, parsed[:used])]
    jobs += _queue_jobs(parsed[:used])
    written: list[tuple[str, int, int]] = _run_weighted(sc, jobs, partial(_write_task, str(staging), cfg))
    shutil.rmtree(parts)
    queues = [w for w in written if w[0] == "queue"]
    index = [w for w in written if w[0] == "index"]
    for d in (staging / "consumequeue", staging / "index", staging):
        fsync_directory(d)
    return {
        "segments": used,
        "records": records,
        "queues": len(queues),
        "queue_entries": sum(w[1] for w in queues),
        "queue_files": sum(w[2] for w in queues),
        "index_files": len(index),
        "index_entries": sum(w[1] for w in index),
        "log_end": log_end,
        "last_store_timestamp": last_ts,
    }


def _run_weighted(sc: Any, jobs: Sequence[_QueueJob | _IndexJob], task: Any) -> list[Any]:
    """``task(job)`` for every job, on a few Spark tasks per core, the jobs shared out by weight
    (heaviest first, each to the lightest task so far) so no core waits long for another."""
    if not jobs:
        return []
    bins: list[list[Any]] = [
        [] for _ in range(min(len(jobs), _TASKS_PER_CORE * max(1, sc.defaultParallelism)))
    ]
    load = [0] * len(bins)
    for job in sorted(jobs, key=lambda j: -j.weight):
        k = load.index(min(load))
        bins[k].append(job)
        load[k] += job.weight
    rdd: RDD[list[Any]] = sc.parallelize(bins, len(bins))
    return rdd.flatMap(lambda jobs: [task(job) for job in jobs]).collect()


def _log_end(parsed: list[_Parsed], paths: StoreLayout) -> tuple[int, int, int, int]:
    """Where dispatch would stop: at the end of the first segment not closed by a BLANK record.
    (log end, segments up to it, records before it, store time of the last of them)."""
    end = parsed[0].start if parsed else 0
    used = records = last_ts = 0
    for k, p in enumerate(parsed):
        used += 1
        records += p.records
        end = p.end
        if p.records:
            last_ts = p.last_store_timestamp
        if not p.closed:
            if p.reason:
                log.warning(
                    "rebuild of %s: the log ends at commitlog offset %d: %s", paths.root, end, p.reason
                )
            ignored = sum(q.records for q in parsed[k + 1 :])
            if ignored:
                log.warning(
                    "rebuild of %s: %d records after the end of the log (offset %d) are not dispatched; "
                    "recovery drops them when the store is next opened",
                    paths.root,
                    ignored,
                    end,
                )
            break
    return end, used, records, last_ts


def _parse_task(
    commitlog: str, parts: str, seg_size: int, check_crc: bool, levels: tuple[int, ...], start: int
) -> _Parsed:
    """Stage 1 of rebuild, on an executor: one segment's valid records read in columns (one
    compiled pass for the header fields, one for the properties, one for the key hashes), with
    no Python object per record, into two parts in ``parts/`` for the stage-2 tasks to slice:

    - ``START-queue.npy``: (physical offset, size, queue offset, tagsCode) of the records that
      get a queue entry (all but PREPARED and ROLLBACK, as in dispatch), grouped by queue, each
      queue's rows in commitlog order; ``_Parsed.queues`` says which rows are which queue's;
    - ``START-keys.npy``: (index hash, physical offset, store time) of every key, in the order
      the index puts them.

    ``scan_extent`` has checked every record up to the end of the valid data, so each of them
    decodes, as ``decode_record`` would have it."""
    with mapped_readonly(Path(commitlog) / f"{start:020d}") as view:
        ext = scan_extent(view, 0, min(len(view), seg_size), check_crc=check_crc)
        positions = message_starts(view, 0, ext.position)[0]
        batch = dispatch_batch(view, positions, np.diff(positions, append=ext.position), start, levels)[0]
    n = len(batch)
    rows, bounds = batch.queue_runs()  # the rows dispatch gives an entry, by queue, in log order
    queues = tuple(
        (batch.topics[int(batch.topic_ids[rows[lo]])], int(batch.queue_ids[rows[lo]]), lo, hi)
        for lo, hi in itertools.pairwise(bounds)
    )
    cols = (batch.physical_offsets, batch.sizes, batch.queue_offsets, batch.tags_codes)
    np.save(Path(parts) / f"{start:020d}-queue.npy", np.stack([c[rows] for c in cols]))
    keys = 0
    if batch.keys.any() or batch.uniq_keys.any():
        hashes, owner = batch_key_hashes(batch)
        keys = len(hashes)
        np.save(
            Path(parts) / f"{start:020d}-keys.npy",
            np.stack([hashes, batch.physical_offsets[owner], batch.store_timestamps[owner]]),
        )
    return _Parsed(
        start,
        n,
        start + ext.position,
        ext.stop == "blank",
        int(batch.store_timestamps[-1]) if n else 0,
        ext.error.reason if ext.error is not None else None,
        queues,
        keys,
    )


def _part(parts: Path, start: int, kind: str) -> npt.NDArray[np.int64]:
    """A segment's queue or key part, mapped: a stage-2 task reads only its rows."""
    part: npt.NDArray[np.int64] = np.load(parts / f"{start:020d}-{kind}.npy", mmap_mode="r")
    return part


def _rows_of(parts: Path, kind: str, slices: Iterable[tuple[int, int, int]]) -> npt.NDArray[np.int64]:
    return np.concatenate([_part(parts, start, kind)[:, lo:hi] for start, lo, hi in slices], axis=1)


def _queue_jobs(parsed: list[_Parsed]) -> list[_QueueJob]:
    runs: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for p in parsed:
        for topic, queue_id, lo, hi in p.queues:
            runs.setdefault((topic, queue_id), []).append((p.start, lo, hi))
    return [_QueueJob(topic, queue_id, tuple(parts)) for (topic, queue_id), parts in runs.items()]


def _index_jobs(parts: Path, index_dir: Path, cfg: StoreConfig, parsed: list[_Parsed]) -> Iterator[_IndexJob]:
    """The index files dispatch would write for these keys, each to be written on its own: a
    file holds ``index_max_entries - 1`` keys, in order; it is named (``new_index_path``) by the
    store time of its first key, as dispatch names it when its clock reads the store time of
    the record being indexed (see the module docstring), and its header starts from the end of
    the file before it, as ``IndexService`` creates it."""
    per_file = cfg.index_max_entries - 1
    firsts = np.cumsum([0, *(p.keys for p in parsed)])
    total = int(firsts[-1])

    def key(i: int) -> tuple[int, int]:  # (physical offset, store time) of key i
        k = int(np.searchsorted(firsts, i, side="right")) - 1
        part = _part(parts, parsed[k].start, "keys")
        return int(part[1, i - firsts[k]]), int(part[2, i - firsts[k]])

    name: str | None = None
    end_phy = end_ts = 0
    for first in range(0, total, per_file):
        last = min(first + per_file, total)
        slices = tuple(
            (p.start, max(0, first - int(lo)), min(p.keys, last - int(lo)))
            for p, lo, hi in zip(parsed, firsts, firsts[1:])
            if lo < last and hi > first and p.keys  # (a segment without keys has no key part)
        )
        name = new_index_path(index_dir, key(first)[1], name).name
        yield _IndexJob(name, end_phy, end_ts, slices)
        end_phy, end_ts = key(last - 1)


def _write_task(staging: str, cfg: StoreConfig, job: _QueueJob | _IndexJob) -> tuple[str, int, int]:
    """Stage 2 of rebuild, on an executor: one queue or one index file. (kind, entries, files)"""
    parts = Path(staging) / "parts"
    if isinstance(job, _IndexJob):
        return _write_index(Path(staging) / "index", cfg, job, _rows_of(parts, "keys", job.parts))
    return _write_queue(Path(staging) / "consumequeue", cfg, job, _rows_of(parts, "queue", job.parts))


def _write_queue(
    root: Path, cfg: StoreConfig, job: _QueueJob, cols: npt.NDArray[np.int64]
) -> tuple[str, int, int]:
    """``cols``: the queue's (physical offset, size, queue offset, tagsCode) rows in log order."""
    phy, size, qo, tags = cols
    queues = ConsumeQueueSet(root, cfg.consume_queue_entries, file_mode=cfg.file_mode, dir_mode=cfg.dir_mode)
    try:
        cq = queues.get_or_create(job.topic, job.queue_id)  # None (logged) for a name dispatch refuses too
        if cq is None:
            return "skipped", 0, 0
        if qo[0] == 0 and bool(np.all(np.diff(qo) == 1)):
            written = cq.put_columns(0, phy, size, tags)
            assert written
        else:  # after expiry, or holes and repeats: the entry-by-entry rules of dispatch
            cq.put(
                [
                    DispatchRequest(p, n, job.topic, job.queue_id, offset, code, 0, 0, None, None)
                    for p, n, offset, code in zip(phy.tolist(), size.tolist(), qo.tolist(), tags.tolist())
                ]
            )
        cq.files.flush_all()
        result = ("queue", cq.max_offset - cq.min_offset, len(cq.files.files))
        directory = cq.files.directory
    finally:
        queues.close()
    fsync_directory(directory)
    fsync_directory(directory.parent)
    return result


def _write_index(
    directory: Path, cfg: StoreConfig, job: _IndexJob, cols: npt.NDArray[np.int64]
) -> tuple[str, int, int]:
    """``cols``: the file's (hash, physical offset, store time) rows, in the order they are put."""
    f = IndexFile(
        directory / job.name,
        cfg.index_hash_slots,
        cfg.index_max_entries,
        create=True,
        end_phy_offset=job.end_phy_offset,
        end_timestamp=job.end_timestamp,
        mode=cfg.file_mode,
    )
    try:
        put = f.put_keys(*np.ascontiguousarray(cols))
        if put != cols.shape[1]:
            raise RebuildError(f"index file {job.name} took {put} of its {cols.shape[1]} keys")
        f.flush()
    finally:
        f.close()
    return "index", put, 1


def _swap_in(paths: StoreLayout, staging: Path) -> None:
    """Put the staged ``consumequeue/`` and ``index/`` in place, each in one atomic step: the
    old ones end up in ``staging`` (deleted with it), and come back if the second swap fails."""
    done: list[str] = []
    try:
        for name in ("consumequeue", "index"):
            _swap_directory(staging / name, paths.root / name, staging / "old")
            done.append(name)
        fsync_directory(paths.root)
    except BaseException:
        for name in reversed(done):  # the old one back
            if (staging / name).exists():
                _swap_directory(staging / name, paths.root / name, staging / "old")
            else:
                os.rename(paths.root / name, staging / name)
        raise


def _swap_directory(new: Path, live: Path, aside: Path) -> None:
    """Make ``new`` the directory at ``live``; whatever was at ``live`` is then at ``new``."""
    if not live.exists():
        os.rename(new, live)
    elif not _exchange(new, live):  # no atomic exchange here: the old one aside, the new one in
        aside.mkdir(exist_ok=True)
        old = aside / live.name
        os.rename(live, old)
        try:
            os.rename(new, live)
        except BaseException:
            os.rename(old, live)
            raise
        os.rename(old, new)


_AT_FDCWD: Final = -100
_RENAME_EXCHANGE: Final = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories in one step (Linux ``renameat2(RENAME_EXCHANGE)``): no moment where
    either name is missing. False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _rewrite_checkpoint(paths: StoreLayout, last_store_timestamp: int) -> None:
    """The consume queues and the index now hold, durably, every record up to the last one:
    their checkpoint times become its store time (the commitlog's time is left alone)."""
    try:
        checkpoint = StoreCheckpoint(paths.checkpoint)
    except CorruptDataError:
        paths.checkpoint.unlink()
        checkpoint = StoreCheckpoint(paths.checkpoint)
    physic = checkpoint.value.physic_msg_timestamp
    checkpoint.value = Checkpoint(physic, last_store_timestamp, last_store_timestamp)
    checkpoint.flush()
