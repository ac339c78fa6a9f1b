"""Checking the commitlog: ``commitlog/{20-digit offset}`` segments, walked by
``codec.commitlog_scan`` (records validated as ``codec.commitlog_record`` decodes them).

- segment size, name = start offset (a multiple of the size), segments contiguous
                                                                  file_size, file_name, missing_file
- each segment scanned from byte 0 with ``scan_extent`` (a segment always parses on its own): an
  invalid record is reported at its global offset with decode_record's reason; a BLANK record
  must fill the segment exactly                                   commitlog_record
- zero fill ends a segment's data; only the last segment holding data may end that way without
  a BLANK record, and nothing non-zero may follow zero fill       commitlog_gap

After a corrupt record the scan resumes at the next position holding a MESSAGE magic code whose
PHYSICALOFFSET field names that very position (``find_record_start``): one damaged record does
not hide the rest of its segment. As each segment is scanned, ``PointerCheck`` checks the
pointers into it while it is mapped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from rocketstore.codec.commitlog_scan import find_record_start, message_starts, scan_extent
from rocketstore.config import StoreConfig
from rocketstore.storage.file_view import mapped_readonly
from rocketstore.storage.paths import StoreLayout, segment_name
from rocketstore.verify.listing import named_files, store_relative
from rocketstore.verify.refs import I64
from rocketstore.verify.report import DamageLog, Progress

if TYPE_CHECKING:
    from rocketstore.verify.pointers import PointerCheck

__all__ = [
    "Segment",
    "check_commitlog",
    "check_missing_segment",
    "check_segment",
    "commitlog_segments",
    "finish_commitlog",
]

_LIVE_RETRIES: Final = 4  # looks again at the tail of a segment a writer may be appending to
_LIVE_PAUSE_S: Final = 0.002  # between those looks: a copy in progress finishes meanwhile


@dataclass
class Segment:
    """One commitlog segment file and what its scan found (filled in by ``check_segment``; a
    Spark task sends it back to the driver for ``finish_commitlog``)."""

    start: int
    path: Path
    rel: str
    size: int = 0  # bytes scanned: the file's size, at most the segment size
    records: int = 0
    valid_end: int = 0  # just past the last valid record, or where the BLANK record is
    ending: str = "zeros"  # "blank"; "zeros" (zero fill from zero_at); "damaged" (unparseable to the end)
    zero_at: int = 0
    scanned: bool = False

    @property
    def has_data(self) -> bool:
        return self.scanned and not (self.ending == "zeros" and self.zero_at == 0)


def check_commitlog(
    paths: StoreLayout,
    cfg: StoreConfig,
    check_crc: bool,
    checker: PointerCheck,
    damage: DamageLog,
    tick: Progress,
) -> tuple[int, tuple[int, int]]:
    seg_size = cfg.commitlog_segment_size
    segments = commitlog_segments(paths, cfg, damage)
    tick("commitlog", 0, len(segments))
    for i, seg in enumerate(segments):
        check_missing_segment(paths, segments, i, seg_size, damage)
        check_segment(seg, seg_size, check_crc, checker, damage, being_written=i >= len(segments) - 2)
        tick("commitlog", i + 1, len(segments))
    return finish_commitlog(segments, seg_size, check_crc, checker, damage)


def commitlog_segments(paths: StoreLayout, cfg: StoreConfig, damage: DamageLog) -> list[Segment]:
    """The segments to scan, by offset; stray and misnamed files are reported."""
    seg_size = cfg.commitlog_segment_size
    files, strays = named_files(paths, paths.commitlog, damage)
    for p in strays:
        damage.add("file_name", store_relative(paths, p), 0, "not a commitlog segment (20-digit offset name)")
    segments: list[Segment] = []
    for start, path in files:
        if start % seg_size:
            damage.add(
                "file_name",
                store_relative(paths, path),
                start,
                f"not a multiple of the segment size {seg_size}; not read",
            )
        else:
            segments.append(Segment(start, path, store_relative(paths, path)))
    return segments


def check_missing_segment(
    paths: StoreLayout, segments: list[Segment], i: int, seg_size: int, damage: DamageLog
) -> None:
    """Segment ``i`` must follow segment ``i - 1`` directly."""
    seg = segments[i]
    if i and seg.start != segments[i - 1].start + seg_size:
        missing = segments[i - 1].start + seg_size
        damage.add(
            "missing_file",
            store_relative(paths, paths.commitlog / segment_name(missing)),
            missing,
            f"commitlog segments missing from offset {missing} to {seg.start}",
        )


def check_segment(
    seg: Segment,
    seg_size: int,
    check_crc: bool,
    checker: PointerCheck,
    damage: DamageLog,
    *,
    being_written: bool,
) -> None:
    """Scan one segment (filling in ``seg``) and check the refs pointing into it."""
    try:
        with mapped_readonly(seg.path) as view:
            if len(view) != seg_size:
                damage.add(
                    "file_size",
                    seg.rel,
                    seg.start + min(len(view), seg_size),
                    f"{len(view)} bytes, expected {seg_size}",
                )
            seg.size = min(len(view), seg_size)
            # a writer appends to one of the last two segments (the newest may be pre-allocated)
            starts, unparsed = _scan_segment(
                view, seg, seg_size, check_crc, damage, being_written=being_written
            )
            seg.scanned = True
            checker.check_segment(view, seg, seg_size, starts, unparsed)
    except FileNotFoundError:  # reclaimed while we looked: as if it had gone before
        checker.skip(seg.start, seg.start + seg_size)


def finish_commitlog(
    segments: list[Segment], seg_size: int, check_crc: bool, checker: PointerCheck, damage: DamageLog
) -> tuple[int, tuple[int, int]]:
    """After every segment was scanned: segments that end in zero fill before later data, refs
    no segment covered; (valid records, commitlog range)."""
    min_offset = segments[0].start if segments else 0
    records = sum(seg.records for seg in segments)
    with_data = [i for i, seg in enumerate(segments) if seg.has_data]
    last = with_data[-1] if with_data else -1
    for seg in segments[:last]:
        if seg.scanned and seg.ending == "zeros" and not _closed_since(seg, seg_size, check_crc):
            damage.add(
                "commitlog_gap",
                seg.rel,
                seg.start + seg.zero_at,
                "segment data ends in zero fill without a BLANK record, but later segments hold data: "
                "recovery steps over it (and RocketMQ would end the log here, dropping everything after)",
            )
    segments_end = segments[-1].start + seg_size if segments else 0
    checker.check_outside(min_offset, segments_end)
    return records, (min_offset, _log_end(segments, last, seg_size, min_offset))


def _log_end(segments: list[Segment], last: int, seg_size: int, min_offset: int) -> int:
    """Where the valid data ends: past the last valid record of the last segment holding data,
    or at the start of the next segment when a BLANK record closes it (as recovery counts)."""
    if last < 0:
        return min_offset
    tail = segments[last]
    following = last + 1 < len(segments) and segments[last + 1].start == tail.start + seg_size
    return tail.start + seg_size if tail.ending == "blank" and following else tail.start + tail.valid_end


def _scan_segment(
    view: memoryview,
    seg: Segment,
    seg_size: int,
    check_crc: bool,
    damage: DamageLog,
    *,
    being_written: bool,
) -> tuple[I64, list[tuple[int, int]]]:
    """Walk one segment's records: (their starts, the spans that could not be parsed).

    In a segment that may be ``being_written``, an invalid record or zero fill with data after it
    may be records a writer is copying in right now (a copy of several records can land later
    ones first, which then read as valid after a half-copied one): the walk looks again from
    there (a few times at most, a moment apart) before it reports anything."""
    limit = seg.size
    runs: list[I64] = []
    unparsed: list[tuple[int, int]] = []
    pos = 0
    retries = _LIVE_RETRIES if being_written else 0
    while True:
        ext = scan_extent(view, pos, limit, check_crc=check_crc)
        if ext.records:
            runs.append(message_starts(view, pos, ext.position)[0])
            seg.records += ext.records
            seg.valid_end = ext.position
        at = ext.position
        if ext.stop == "blank":
            seg.ending, seg.valid_end = "blank", at
            if ext.blank_size != seg_size - at:
                damage.add(
                    "commitlog_record",
                    seg.rel,
                    seg.start + at,
                    f"BLANK record of TOTALSIZE {ext.blank_size}, but {seg_size - at} bytes are left "
                    "in the segment",
                )
            break
        if ext.stop == "corrupt":
            if retries:
                retries, pos = retries - 1, at
                time.sleep(_LIVE_PAUSE_S)
                continue
            resume = _resync(view, at + 1, limit, seg.start)
            reason = ext.error.reason if ext.error is not None else "invalid record"
            damage.add("commitlog_record", seg.rel, seg.start + at, reason)
        else:  # zero fill, or fewer than 8 bytes left
            data_at = _first_nonzero(view, at, limit)
            if data_at < 0:
                seg.ending, seg.zero_at = "zeros", at
                break
            if retries:
                retries, pos = retries - 1, at
                time.sleep(_LIVE_PAUSE_S)
                continue
            damage.add(
                "commitlog_gap",
                seg.rel,
                seg.start + at,
                f"zero fill, then data again at offset {seg.start + data_at}: in the last segment "
                "holding data recovery ends the log here, in an older one it steps over it",
            )
            resume = _resync(view, at, limit, seg.start)
        if resume < 0:
            unparsed.append((at, limit))
            seg.ending = "damaged"
            break
        unparsed.append((at, resume))
        pos = resume
    starts = np.concatenate(runs) if runs else np.zeros(0, dtype=np.int64)
    return starts, unparsed


def _closed_since(seg: Segment, seg_size: int, check_crc: bool) -> bool:
    """Whether a segment that ended in zero fill when it was scanned now ends in a BLANK record:
    a writer rolled over to the next segment meanwhile."""
    try:
        with mapped_readonly(seg.path) as view:
            return scan_extent(view, seg.zero_at, seg.size, check_crc=check_crc).stop == "blank"
    except FileNotFoundError:
        return False


def _resync(view: memoryview, start: int, limit: int, seg_start: int) -> int:
    """The next position >= start that holds a record start (a MESSAGE magic code and a
    PHYSICALOFFSET naming that very position), or -1."""
    u8 = np.frombuffer(view, dtype=np.uint8)
    try:
        return int(find_record_start(u8, start, limit, seg_start))
    finally:
        del u8


def _first_nonzero(view: memoryview, start: int, limit: int) -> int:
    u8 = np.frombuffer(view, dtype=np.uint8)
    try:
        chunk = 1 << 24
        for lo in range(start, limit, chunk):
            part = u8[lo : min(lo + chunk, limit)]
            if np.count_nonzero(part):
                return lo + int(np.argmax(part != 0))
        return -1
    finally:
        del u8
