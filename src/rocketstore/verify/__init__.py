"""Checking a store directory without changing it: the engine of ``rocketstore verify``.

Every file is opened read-only (``mmap.ACCESS_READ``); the lock is not taken and nothing is
written (no abort file, no recovery), so a store another process has open, or a damaged one, can
be checked as it is. Corrupt bytes never raise: each length or offset read from a file is
bounded before it is used, each walk moves strictly forward, and whatever is wrong becomes a
``Damage`` (kind, file relative to the store root, offset, one line of detail).

One checker per structure, each reading its files through the codec module that owns their
bytes (each module's docstring lists its checks and the damage kinds they report)::

    queues.py         consumequeue/{topic}/{queueId}/{file}   codec.consume_queue_entry
    index_files.py    index/{yyyyMMddHHmmssSSS}               codec.index_layout
    segments.py       commitlog/{20-digit offset}             codec.commitlog_scan
    pointers.py       every pointer into the commitlog gathered from the queues and the index,
                      against the record it names; every key the index should hold
                      (pointer_kernels.py: its compiled loops)
    metadata.py       checkpoint (4096 bytes), config/ (a directory), the geometry
    timers.py         timerwheel, timerlog/, config/timercheck, config/timermetrics
    listing.py        directory walks: links are not followed; a store file that is not a
                      regular file, or a store directory that is not a real directory, is
                      reported and not read (file_type); stray names are reported (file_name)
    report.py         Damage, VerifyReport, and the log collecting them
    refs.py           the gathered pointers, as numpy columns sorted by commitlog offset

``spark.maintenance.verify`` runs the same checkers on Spark tasks.

A store being written. Queues and index are read before the commitlog: dispatch follows the
append, so every entry read points at a record that exists by the time the commitlog scan gets
there. Where a writer works, what looks damaged is looked at again before it is reported: the
newest file of each queue is read twice and only what both reads agree on is checked (a copy
can land in any byte order); the tail of the last two segments (a record half copied in, zero
fill a record is landing on) and a segment that ended in zero fill (the writer may have closed
it with a BLANK record since) are scanned again; index slots past the header's count are read
again (the writer updates the header last).

Cost. Records are validated by the compiled ``scan_extent`` walk (CRC included). Pointers are
checked with compiled kernels that read the few fields they need straight from the mapped
segment (through ``commitlog_scan.record_header`` / ``record_layout``: TOTALSIZE, QUEUEID,
QUEUEOFFSET, SYSFLAG, STORETIMESTAMP, the topic bytes, the TAGS / KEYS / UNIQ_KEY properties,
Java's hash over their UTF-16 code units), no per-record Python work: only values that are not
strict UTF-8 go through ``decode_record`` and ``decode_properties`` to be hashed exactly as
dispatch hashed them. The keys of a segment's records are hashed once; index entries are checked
against them and they against the entries by binary search over sorted
``(position << 32) | keyHash`` pairs. About 0.9 s per million records of 100 B with a
consume-queue entry and two index entries each, CRC included (the CRC is 0.2 s of it), before the
every-key check; that check added about a quarter (measured on a loaded 2-core machine: 6.6 s ->
8.4 s for a million records; ``benchmarks/verify.py``). Memory: about 50 bytes per consume-queue
entry and 25 per index entry gathered (twice that while they are sorted), about 60 per entry of
the index file being checked, 8 per record of the segment being scanned, and 24 per key of that
segment's records. At most ``MAX_DAMAGE_PER_FILE`` problems are listed per file; one more line
counts the rest.
"""

from __future__ import annotations

import os

from rocketstore.config import StoreConfig
from rocketstore.storage.paths import StoreLayout
from rocketstore.verify.index_files import IndexCover as IndexCover  # importable here, as before the split
from rocketstore.verify.index_files import index_cover, new_index_refs, read_index_files
from rocketstore.verify.metadata import check_checkpoint, check_config_dir, geometry
from rocketstore.verify.pointers import PointerCheck
from rocketstore.verify.queues import Queues, new_queue_refs, read_consume_queues
from rocketstore.verify.report import (
    DAMAGE_KINDS,
    MAX_DAMAGE_PER_FILE,
    Damage,
    DamageLog,
    Progress,
    VerifyReport,
    no_progress,
)
from rocketstore.verify.segments import check_commitlog
from rocketstore.verify.timers import check_timer_files

__all__ = ["DAMAGE_KINDS", "MAX_DAMAGE_PER_FILE", "Damage", "VerifyReport", "verify_store"]


def verify_store(
    root: str | os.PathLike[str],
    config: StoreConfig | None = None,
    *,
    check_crc: bool = True,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check every file of the store at ``root`` (see the module docstring); change nothing.

    ``config`` gives the geometry (segment and index sizes); None reads it from the files.
    ``progress(stage, done, total)`` is called per file, stages "consumequeue", "index" and
    "commitlog". Raises NotAStoreError when ``root`` holds no store, StorePathError when it is
    not a directory; never for damaged files.
    """
    paths = StoreLayout(root)
    paths.require_store()
    cfg = geometry(paths, config)
    damage = DamageLog()
    tick: Progress = progress or no_progress
    queues = Queues()
    queue_refs = new_queue_refs()
    queue_entries = read_consume_queues(paths, cfg, queues, queue_refs, damage, tick)
    index_files: list[str] = []
    index_refs = new_index_refs()
    cover = index_cover(paths, cfg, damage)  # before the entries: a writer updates headers last
    index_entries = read_index_files(paths, cfg, index_files, index_refs, damage, tick)
    cover = cover.quieting(damage)
    checker = PointerCheck(queues, queue_refs, index_files, index_refs, damage, cover)
    records, commitlog_range = check_commitlog(paths, cfg, check_crc, checker, damage, tick)
    check_checkpoint(paths, damage)
    check_config_dir(paths, damage)
    check_timer_files(paths, commitlog_range[1], cfg.timer_log_segment_size, damage)
    return VerifyReport(damage.result(), records, queue_entries, index_entries, commitlog_range)
