"""Recovery at open (STORE.md §7): make the commitlog, consume queues and index agree again.

Order: consume queues first (each keeps its entries up to the last valid one); then the
commitlog is scanned to its last valid record, from the third-last segment after a clean
shutdown, or after a crash from the newest segment whose first record is older than the
checkpoint says is safe; everything past that record is cut, and consume-queue entries and
index files pointing past it are dropped. The dispatcher then resumes from ``reput_from``, the
earliest point the queues or the index may lack (dispatch is idempotent).

A queue whose newest segment or whole directory was deleted leaves nothing damaged behind, only
a short queue: records of the scanned stretch that no queue holds show it, and so (for a queue
whose records are older) does a queue ending at a full segment, or with no segment left: the
log is then checked from that queue's end (its start). A healthy store pays a walk of record
headers over the stretch recovery scans anyway, and the longer one only for a queue that
happens to end exactly at a segment's end.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rocketstore.checkpoint import StoreCheckpoint
from rocketstore.codec.commitlog_scan import (
    Extent,
    first_torn_record,
    message_starts,
    next_record_start,
    record_fields,
    scan_extent,
    store_timestamps,
)
from rocketstore.codec.consume_queue_entry import PRE_BLANK_SIZE
from rocketstore.commitlog import CommitLog
from rocketstore.config import StoreConfig
from rocketstore.consume_queue import ConsumeQueueSet
from rocketstore.dispatch_request import gets_queue_entry
from rocketstore.errors import CorruptDataError
from rocketstore.index import IndexService
from rocketstore.storage.mapped_file import MappedFile

__all__ = ["DamagedRange", "RecoveryReport", "log_report", "recover"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecoveryReport:
    abnormal: bool
    scan_start: int  # commitlog offset the scan began at
    end_offset: int  # one past the last valid record: the commitlog's max offset now
    records_scanned: int
    # why the scan ended: "blank" (end of the last segment), "end_of_data" or "corrupt"; a read-only
    # open beside a live writer says "writer_live" when it stopped in the unpublished tail (follow.py)
    stop: str
    damage: str | None  # what was wrong with the first invalid record, when stop == "corrupt"
    segments_deleted: int  # segments wholly past end_offset, removed
    bytes_cut: int  # bytes of data (not zero fill) past end_offset that were dropped
    reput_from: int  # where dispatch resumes
    queue_bytes_damaged: int = 0  # non-zero bytes cut after the last valid entry of consume queues
    queue_entries_dropped: int = 0  # entries that pointed past end_offset
    # damaged stretches of segments older than the last one holding data: stepped over, kept
    stepped_over: tuple[DamagedRange, ...] = ()
    queue_holes: int = 0  # missing entries between valid ones of consume queues, rebuilt by re-dispatch
    # index files found damaged or lost at open and rebuilt from the commitlog, one line each:
    # consume-queue segments emptied, cut short or after a gap (dropped), queues short of entries
    # for records the commitlog holds (their newest segment or directory deleted), index files
    # after the last one left deleted, an unreadable checkpoint (ignored)
    rebuilt: tuple[str, ...] = ()


@dataclass(frozen=True)
class DamagedRange:
    """Bytes of the commitlog that hold no valid record, before later valid ones: ``[start,
    end)``, ``end`` being the next valid record start or the end of the segment."""

    start: int
    end: int
    reason: str


def recover(
    commitlog: CommitLog,
    queues: ConsumeQueueSet,
    index: IndexService | None,
    checkpoint: StoreCheckpoint,
    config: StoreConfig,
    *,
    abnormal: bool,
) -> RecoveryReport:
    files = commitlog.files.files
    start_index = 0
    if files:
        start_index = _abnormal_start(commitlog, checkpoint, config) if abnormal else max(0, len(files) - 3)
    # After a crash, queue entries after the checkpoint's safe point may have holes: check from there.
    from_physical = files[start_index].from_offset if files and abnormal else None
    cut = [(cq, cq.recover(from_physical)) for cq in queues]
    damaged_queues = [cq for cq, damaged_bytes in cut if damaged_bytes or cq.dropped]
    rebuilt = tuple(line for cq in queues for line in cq.dropped)
    if checkpoint.damage is not None:
        rebuilt += (checkpoint.damage,)
    queue_damage = sum(damaged_bytes for _, damaged_bytes in cut)
    if not files:
        dropped = sum(cq.truncate_after(0) for cq in queues)
        if index is not None:
            index.truncate_after(0)  # index files of a log that is not there: new records get indexed
        return RecoveryReport(
            abnormal, 0, 0, 0, "end_of_data", None, 0, 0, 0, queue_damage, dropped, rebuilt=rebuilt
        )

    scan_start = files[start_index].from_offset
    # after a crash, what was stored later than the checkpoint's flush time may never have
    # reached the disk (an unreadable checkpoint tells nothing: then nothing counts as such). A
    # read-only view cuts nothing: beside a live writer, what it scanned first may be older than
    # what it scanned next, and a half-written record then is no tear
    flushed_until = (
        checkpoint.value.physic_msg_timestamp
        if abnormal
        and not commitlog.files.readonly
        and checkpoint.damage is None
        and checkpoint.value.physic_msg_timestamp > 0
        else None
    )
    scan, end, records, stepped_over = _scan_log(
        files[start_index:], config.check_crc_on_recover, flushed_until
    )
    damage = scan.error.reason if scan.error is not None else None
    before = len(commitlog.files.files)
    bytes_cut = commitlog.files.truncate(end)
    deleted = before - len(commitlog.files.files)

    dropped = sum(cq.truncate_after(end) for cq in queues if cq.max_physical_offset > end)
    # Dispatch resumes where the queues end; a queue cut for damage, and after a crash every
    # queue (one may have lost entries the others kept), from further back.
    reput_from = max(queues.max_physical_offset(), commitlog.min_offset, 0)
    for cq in damaged_queues:
        reput_from = min(reput_from, max(cq.max_physical_offset, commitlog.min_offset, 0))
    if abnormal:
        reput_from = min(reput_from, scan_start)
    if not commitlog.files.readonly:  # a read-only view re-dispatches nothing
        # A queue whose newest segment, or whole directory, was deleted shows no damage in what
        # is left: it is only short. Records no queue holds are looked for in the stretch just
        # scanned, and from the end of each queue that may lack its newest segment.
        check_from = min(
            [scan_start]
            + [
                max(cq.max_physical_offset, commitlog.min_offset, 0)
                for cq in queues
                if cq.may_lack_newest_segment
            ]
        )
        flushed = checkpoint.value.logics_msg_timestamp if abnormal else None
        first_lost, lines = _entries_lost(commitlog, queues, check_from, end, flushed)
        if first_lost is not None:
            reput_from = min(reput_from, first_lost)
        rebuilt += lines
    queue_holes = 0
    for cq in queues:
        for first, stop in cq.holes:
            queue_holes += stop - first
            # re-dispatch fills the hole from the record after the entry before it
            prior = cq.entry_at(first - 1) if first > cq.min_offset else None
            after = prior[0] + prior[1] if prior is not None and 0 < prior[1] < PRE_BLANK_SIZE else 0
            reput_from = min(reput_from, max(after, commitlog.min_offset, 0))
    if index is not None and not commitlog.files.readonly:
        lost_index = index.lost_newest(commitlog.min_offset, end, commitlog.message_at)
        if lost_index is not None and index.reindex_from is not None:
            rebuilt += (lost_index,)
            reput_from = min(reput_from, max(index.reindex_from, commitlog.min_offset))
    if index is not None:
        # The dispatcher writes queues before the index: after an unclean stop the index may
        # lack the last records the queues have. Resume from the last indexed record.
        last_indexed = index.last_indexed_offset
        if last_indexed >= 0:
            reput_from = min(reput_from, max(last_indexed, commitlog.min_offset))
        rebuild_from = index.truncate_after(end)
        if abnormal:
            dropped_from = index.drop_newer_than(checkpoint.value.index_msg_timestamp)
            if dropped_from is not None:
                rebuild_from = dropped_from if rebuild_from is None else min(rebuild_from, dropped_from)
        if rebuild_from is not None and not commitlog.files.readonly:  # a read-only view re-indexes nothing
            log.info("recovery: index entries past %d dropped; re-indexing from %d", end, rebuild_from)
            reput_from = min(reput_from, rebuild_from)
    min_offset = commitlog.min_offset
    table = commitlog.topic_queue_table
    table.clear()
    for cq in queues:
        cq.correct_min_offset(min_offset)
        table[(cq.topic, cq.queue_id)] = cq.max_offset
    return RecoveryReport(
        abnormal,
        scan_start,
        end,
        records,
        scan.stop,
        damage,
        deleted,
        bytes_cut,
        min(reput_from, end),
        queue_damage,
        dropped,
        stepped_over,
        queue_holes,
        rebuilt,
    )


def _entries_lost(
    commitlog: CommitLog, queues: ConsumeQueueSet, start: int, end: int, flushed_until: int | None
) -> tuple[int | None, tuple[str, ...]]:
    """Records in ``[start, end)`` that should have a queue entry
    and have none: the first one's offset (None if none), and one line per queue whose entries
    were lost rather than never written: every one after a clean stop; after a crash, those of
    records no newer than ``flushed_until`` (the checkpoint's time up to which the queues were
    flushed; later ones were never flushed, which is no damage). Queues load already found
    damaged (segments dropped, holes) are reported there."""
    queued = queues.physical_offsets_from(start)
    first: int | None = None
    lost: dict[tuple[str, int], list[int]] = {}
    for mf in commitlog.files.files:
        base = mf.from_offset
        if base + mf.size <= start or base >= end:
            continue
        starts, _, _ = message_starts(mf.buf, max(0, start - base), min(mf.size, end - base))
        if len(queued) and len(starts):
            at = np.minimum(np.searchsorted(queued, starts + base), len(queued) - 1)
            starts = starts[queued[at] != starts + base]
        if not len(starts):
            continue
        fields = record_fields(mf.buf, starts)
        wanted = gets_queue_entry(fields["sys_flag"])
        if not wanted.any():
            continue  # transaction halves (PREPARED, ROLLBACK) get no entry
        if first is None:
            first = base + int(starts[wanted][0])
        if flushed_until is not None:
            wanted &= fields["store_timestamp"] <= flushed_until
        columns = (
            fields[name][wanted].tolist() for name in ("topic_at", "topic_len", "queue_id", "queue_offset")
        )
        for topic_at, topic_len, queue_id, queue_offset in zip(*columns, strict=True):
            topic = bytes(mf.buf[topic_at : topic_at + topic_len]).decode("utf-8", "replace")
            lost.setdefault((topic, queue_id), []).append(queue_offset)
    lines = []
    for (topic, queue_id), offsets in sorted(lost.items()):
        cq = queues.get(topic, queue_id)
        queue_end = cq.max_offset if cq is not None else 0
        if min(offsets) > queue_end and first is not None:
            # its records between its end and the scanned stretch are lost too: from its end on
            # (from the log's start for a queue with no entry left)
            resume = cq.max_physical_offset if cq is not None else 0
            first = min(first, max(resume, commitlog.min_offset, 0))
        if cq is not None and (cq.dropped or cq.holes):
            continue
        lines.append(
            f"consume queue {topic}/{queue_id}: entries at queue offsets {min(min(offsets), queue_end)}.."
            f"{max(offsets)} missing for records the commitlog holds (its newest segment or directory "
            "deleted)"
        )
    return first, tuple(lines)


def log_report(report: RecoveryReport, *, readonly: bool) -> None:
    """Log what recovery did, as it happened: a writer cut the log and deleted segments; a
    read-only open only stopped reading there (no file changed), and beside a live writer what
    lies past its published end is that writer's work in progress, not damage (follow.py).
    Called once the report is final (a follower's ``attach`` may replace it)."""
    r = report
    if r.stop == "writer_live":
        log.info(
            "read-only open beside a live writer: scanned %d records from commitlog offset %d; following "
            "it from offset %d (what lies past it is the writer's work in progress)",
            r.records_scanned,
            r.scan_start,
            r.end_offset,
        )
        return
    kind = "abnormal" if r.abnormal else "normal"
    if r.rebuilt:
        log.warning(
            "recovery: damaged files %s from the commitlog: %s",
            "read around" if readonly else "rebuilt",
            "; ".join(r.rebuilt),
        )
    if readonly:
        if r.damage:
            log.warning(
                "read-only recovery: invalid record at commitlog offset %d, the view ends there: %s",
                r.end_offset,
                r.damage,
            )
        log.info(
            "read-only recovery (%s): scanned %d records from commitlog offset %d; the view ends at %d (%s); "
            "%d bytes of data and %d later segment(s) past it left unread (no file changed)",
            kind,
            r.records_scanned,
            r.scan_start,
            r.end_offset,
            r.stop,
            r.bytes_cut,
            r.segments_deleted,
        )
        return
    if r.damage:
        log.warning(
            "recovery: invalid record at commitlog offset %d, everything from there is cut: %s",
            r.end_offset,
            r.damage,
        )
    log.info(
        "recovery (%s): scanned %d records from commitlog offset %d; the log ends at %d (%s); "
        "%d bytes of data after it cut, %d later segment(s) deleted",
        kind,
        r.records_scanned,
        r.scan_start,
        r.end_offset,
        r.stop,
        r.bytes_cut,
        r.segments_deleted,
    )


def _scan_log(
    files: list[MappedFile], check_crc: bool, flushed_until: int | None = None
) -> tuple[Extent, int, int, tuple[DamagedRange, ...]]:
    """Scan the segments ``files`` (each parses on its own, from its byte 0): (the scan of the
    segment the log ends in, where it ends, valid records, damaged ranges stepped over).

    The log ends in the last segment that holds data, at its first invalid record. Damage in an
    older segment is stepped over to the next valid record start: cutting there would drop the
    later segments' valid records, and a later open scanning from further back than this one
    would cut below what this one accepted (and what was acknowledged since).

    After a crash, ``flushed_until`` is the checkpoint's time up to which the log was flushed.
    Damage whose next valid record was stored later than that is the torn tail of what was
    written and not flushed: a power cut leaves some of its pages written back, in no order.
    Flushes go in log order, so nothing after the damage was flushed either (nor acknowledged
    under SYNC_FLUSH). The log ends at the damage, as RocketMQ's recovery ends at the first
    invalid record; stepped over, the tail's consume-queue entries would point into it."""
    scans = [scan_extent(mf.buf, 0, mf.size, check_crc=check_crc) for mf in files]
    holding = [i for i, e in enumerate(scans) if e.position > 0 or e.stop == "blank"]
    last = holding[-1] if holding else 0
    stepped_over: list[DamagedRange] = []
    records = 0
    for i in range(last):
        ranges, more, torn_tail = _step_over(files, scans, i, check_crc, flushed_until)
        stepped_over += ranges
        records += more
        if torn_tail is not None:  # the log ends here
            last = i
            scans[i] = torn_tail
            break
    else:
        records += scans[last].records
    if scans[last].stop == "blank" and last + 1 < len(files):
        last += 1  # a BLANK record closes it: the log goes on at the next segment's start
    end = files[last].from_offset + scans[last].position
    torn = _torn_unflushed(files[: last + 1], end, flushed_until) if flushed_until is not None else None
    if torn is not None:
        last, at, kept_there, dropped = torn
        mf = files[last]
        end = mf.from_offset + at
        records -= dropped
        error = CorruptDataError(
            "a page of the record's topic or properties reads as zeros: torn by a power cut before a flush",
            path=str(mf.path),
            offset=end,
        )
        scans[last] = Extent(at, kept_there, "corrupt", 0, error)
        stepped_over = [r for r in stepped_over if r.start < end]
    for r in stepped_over:
        log.warning(
            "recovery: commitlog bytes %d..%d hold no valid record (%s); stepped over, later records kept",
            r.start,
            r.end,
            r.reason,
        )
    return scans[last], end, records, tuple(stepped_over)


def _step_over(
    files: list[MappedFile], scans: list[Extent], i: int, check_crc: bool, flushed_until: int | None
) -> tuple[list[DamagedRange], int, Extent | None]:
    """Segment ``files[i]`` (not the last one holding data; ``scans[i]`` its scan from byte 0):
    its damaged ranges stepped over, its valid records up to where the log goes on or ends, and,
    when damage in it is the torn tail (see ``_scan_log``), the scan that ends the log there."""
    mf, scan = files[i], scans[i]
    ranges: list[DamagedRange] = []
    records = scan.records
    while scan.stop != "blank" and scan.position < mf.size:
        at = scan.position
        resume = next_record_start(mf.buf, at + 1, mf.size, mf.from_offset)
        if flushed_until is not None and _next_stored_after(files, scans, i, resume, flushed_until):
            return ranges, records, Extent(at, records, "corrupt", 0, scan.error)
        reason = scan.error.reason if scan.error is not None else "zero fill without a closing BLANK record"
        ranges.append(DamagedRange(mf.from_offset + at, mf.from_offset + resume, reason))
        if resume >= mf.size:
            break
        scan = scan_extent(mf.buf, resume, mf.size, check_crc=check_crc)
        records += scan.records
    return ranges, records, None


def _torn_unflushed(
    files: list[MappedFile], end: int, flushed_until: int
) -> tuple[int, int, int, int] | None:
    """The first record before ``end`` stored after ``flushed_until`` that a lost page tore where
    the scan does not look (``first_torn_record``): a power cut writes back what was not flushed
    in no order. (Index of its segment in ``files``, its position there, how many records of
    that segment precede it, how many records from it to ``end``); None when there is none.
    Records flushed before the cut are not checked: their pages reached the disk."""
    tail: list[tuple[int, npt.NDArray[np.int64], int]] = []  # (segment, record starts, first one not flushed)
    for i in range(len(files) - 1, -1, -1):
        mf = files[i]
        if mf.from_offset >= end:
            continue
        starts, _, _ = message_starts(mf.buf, 0, min(mf.size, end - mf.from_offset))
        fresh = np.flatnonzero(store_timestamps(mf.buf, starts) > flushed_until)
        if len(fresh):
            tail.append((i, starts, int(fresh[0])))
        if len(starts) and (not len(fresh) or fresh[0] > 0):
            break  # this segment's first records were flushed, and every one before them
    for k in range(len(tail) - 1, -1, -1):
        i, starts, first = tail[k]
        torn = first_torn_record(files[i].buf, starts[first:])
        if torn >= 0:
            at = first + torn
            later = sum(len(s) for _, s, _ in tail[:k])
            return i, int(starts[at]), at, len(starts) - at + later
    return None


def _next_stored_after(
    files: list[MappedFile], scans: list[Extent], i: int, at: int, flushed_until: int
) -> bool:
    """Whether the first valid record at or after byte ``at`` of segment ``files[i]`` (or, with
    none left there, of the later segments) was stored after ``flushed_until``."""
    for j in range(i, len(files)):
        mf = files[j]
        if j > i:  # from the segment's start: its first record, or the first valid one after damage
            at = 0 if scans[j].records else next_record_start(mf.buf, 1, mf.size, mf.from_offset)
        if at < mf.size:
            fields = record_fields(mf.buf, np.array([at], dtype=np.int64))
            return int(fields["store_timestamp"][0]) > flushed_until
    return False


def _abnormal_start(commitlog: CommitLog, checkpoint: StoreCheckpoint, config: StoreConfig) -> int:
    """Index of the newest segment whose first record was stored before the checkpoint's safe time."""
    safe = checkpoint.min_timestamp(include_index=config.message_index_enable and config.message_index_safe)
    files = commitlog.files.files
    for i in range(len(files) - 1, -1, -1):
        ts = commitlog.store_timestamp_at(files[i].from_offset)
        if 0 < ts <= safe:
            return i
    return 0
