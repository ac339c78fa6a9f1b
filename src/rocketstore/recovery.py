"""Recovery at open (STORE.md §7): make the commitlog, consume queues and index agree again.

Order: consume queues first (each keeps its entries up to the last valid one); then the
commitlog is scanned to its last valid record, from the third-last segment after a clean
shutdown, or after a crash from the newest segment whose first record is older than the
checkpoint says is safe; everything past that record is cut, and consume-queue entries and
index files pointing past it are dropped. The dispatcher then resumes from ``reput_from``, the
earliest point the queues or the index may lack (dispatch is idempotent).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from rocketstore.checkpoint import StoreCheckpoint
from rocketstore.codec.commitlog_scan import scan_extent
from rocketstore.commitlog import CommitLog
from rocketstore.config import StoreConfig
from rocketstore.consume_queue import ConsumeQueueSet
from rocketstore.index import IndexService

__all__ = ["RecoveryReport", "recover"]

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
    damaged_queues = [cq for cq, damaged_bytes in cut if damaged_bytes]
    queue_damage = sum(damaged_bytes for _, damaged_bytes in cut)
    if not files:
        for cq in queues:
            cq.truncate_after(0)
        dropped = sum(cq.truncate_after(0) for cq in queues)
        return RecoveryReport(abnormal, 0, 0, 0, "end_of_data", None, 0, 0, 0, queue_damage, dropped)

    scan_start = files[start_index].from_offset
    end = scan_start
    records = 0
    scan = None
    for mf in files[start_index:]:
        scan = scan_extent(mf.buf, 0, mf.size, check_crc=config.check_crc_on_recover)
        records += scan.records
        end = mf.from_offset + scan.position
        if scan.stop != "blank":
            break
    assert scan is not None
    damage = scan.error.reason if scan.error is not None else None
    if damage:
        log.warning(
            "recovery: invalid record at commitlog offset %d, everything from there is cut: %s", end, damage
        )
    before = len(commitlog.files.files)
    bytes_cut = commitlog.files.truncate(end)
    deleted = before - len(commitlog.files.files)
    log.info(
        "recovery (%s): scanned %d records from commitlog offset %d; the log ends at %d (%s); "
        "%d bytes of data after it cut, %d later segment(s) deleted",
        "abnormal" if abnormal else "normal",
        records,
        scan_start,
        end,
        scan.stop,
        bytes_cut,
        deleted,
    )

    dropped = sum(cq.truncate_after(end) for cq in queues if cq.max_physical_offset > end)
    # Dispatch resumes where the queues end; a queue cut for damage, and after a crash every
    # queue (one may have lost entries the others kept), from further back.
    reput_from = max(queues.max_physical_offset(), commitlog.min_offset, 0)
    for cq in damaged_queues:
        reput_from = min(reput_from, max(cq.max_physical_offset, commitlog.min_offset, 0))
    if abnormal:
        reput_from = min(reput_from, scan_start)
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
        if rebuild_from is not None:
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
    )


def _abnormal_start(commitlog: CommitLog, checkpoint: StoreCheckpoint, config: StoreConfig) -> int:
    """Index of the newest segment whose first record was stored before the checkpoint's safe time."""
    safe = checkpoint.min_timestamp(include_index=config.message_index_enable and config.message_index_safe)
    files = commitlog.files.files
    for i in range(len(files) - 1, -1, -1):
        ts = commitlog.store_timestamp_at(files[i].from_offset)
        if 0 < ts <= safe:
            return i
    return 0
