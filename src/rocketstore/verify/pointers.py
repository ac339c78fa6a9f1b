"""Checking the pointers into the commitlog against the records they name, one segment at a
time while it is mapped (``PointerCheck.check_segment``); pointers below the commitlog's first
segment are reclaimed, not damage.

- a consume-queue entry must name the START of a valid record whose TOTALSIZE is the entry's
  size, whose topic and queue id are the queue's directory names, whose QUEUEOFFSET is the
  entry's queue offset, and whose tags hash to the entry's tagsCode (in SCHEDULE_TOPIC_XXXX the
  tagsCode is the delivery time: it must lie after the store time)   consume_queue_entry
- an index entry must name the start of a valid record one of whose keys (UNIQ_KEY, and each
  space-separated KEYS) hashes, as ``topic#key``, to the entry's keyHash       index_entry
- the other way round, each key dispatch indexes of each valid record the index covers
  (``IndexCover``) must have an entry naming that record with that keyHash     index_missing

A pointer into bytes that could not be parsed is not reported (the commitlog damage covers it);
one into zero fill, into a missing segment or past the last one is. The fields are compared by
the compiled ``pointer_kernels``; only what they find wrong (or cannot hash) is decoded by
``decode_record`` to be described or hashed exactly as dispatch hashed it.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from rocketstore.codec.commitlog_record import DecodedRecord, decode_record
from rocketstore.codec.commitlog_scan import record_fields, store_timestamps
from rocketstore.codec.java_hash import index_key_hash, tags_code
from rocketstore.codec.properties import decode_properties
from rocketstore.message import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, split_keys
from rocketstore.verify.index_files import IndexCover
from rocketstore.verify.pointer_kernels import (
    Q_DECODE,
    Q_DELIVERY,
    Q_OK,
    Q_QUEUE_ID,
    Q_QUEUE_OFFSET,
    Q_SIZE,
    Q_TAGS,
    Q_TOPIC,
    queue_verdicts,
    record_key_hashes,
)
from rocketstore.verify.queues import Queues
from rocketstore.verify.refs import I64, Refs
from rocketstore.verify.report import DamageLog
from rocketstore.verify.segments import Segment

__all__ = ["PointerCheck"]

# Where a pointer lands in its segment (_locate)
_AT_RECORD: Final = 0
_UNPARSED: Final = 1
_NO_RECORD: Final = 2
_INSIDE: Final = 3

# How an index entry's keyHash compares with its record's keys (_check_index_refs)
_K_MATCH: Final = 0
_K_NONE: Final = 1
_K_DECODE: Final = 2  # keys that are not strict UTF-8: hashed in Python


class PointerCheck:
    """Checks the consume-queue and index refs pointing into each segment, as it is scanned."""

    def __init__(
        self,
        queues: Queues,
        queue_refs: Refs,
        index_files: list[str],
        index_refs: Refs,
        damage: DamageLog,
        cover: IndexCover | None = None,
    ) -> None:
        self.queues = queues
        self.queue_refs = queue_refs
        self.index_files = index_files
        self.index_refs = index_refs
        self.damage = damage
        self.cover = cover or IndexCover()
        self.topic_bytes, self.topic_offsets, self.queue_ids, self.schedule = queues.arrays()

    def check_segment(
        self, view: memoryview, seg: Segment, seg_size: int, starts: I64, unparsed: list[tuple[int, int]]
    ) -> None:
        keys = _SegmentKeys(view, starts) if self.cover.files else None
        for refs in (self.queue_refs, self.index_refs):
            sl = refs.span(seg.start, seg.start + seg_size)
            refs.done[sl] = True
            if sl.start == sl.stop:
                continue
            rel = refs["phy"][sl] - seg.start
            where = _locate(rel, starts, unparsed, seg)
            at = np.flatnonzero(where == _AT_RECORD)
            if len(at) and refs is self.queue_refs:
                self._check_queue_refs(view, seg, rel[at], sl.start + at)
            elif len(at):
                self._check_index_refs(view, seg, rel[at], sl.start + at, keys or _SegmentKeys(view, starts))
            for i in np.flatnonzero((where == _NO_RECORD) | (where == _INSIDE)).tolist():
                self._report(refs, sl.start + i, _misplaced(view, seg, starts, int(rel[i]), int(where[i])))
        if keys is not None:
            self._check_keys_indexed(view, seg, seg_size, keys)

    def _check_keys_indexed(self, view: memoryview, seg: Segment, seg_size: int, keys: _SegmentKeys) -> None:
        """Every key of the segment's records (within what the index covers) has its entry."""
        cover = self.cover
        starts = keys.starts
        if not len(starts):
            return
        required = (starts <= cover.complete_through - seg.start) & ~keys.rollback
        if cover.indexed_before > 0 and not required.all():
            required |= (store_timestamps(view, starts) < cover.indexed_before) & ~keys.rollback
        r = self.index_refs
        sl = r.span(seg.start, seg.start + seg_size)
        present = np.sort(((r["phy"][sl] - seg.start) << 32) | r["key_hash"][sl].astype(np.int64))
        missing = ~_members(present, keys.pairs) & required[keys.record]
        suspects = sorted(
            set(keys.record[missing].tolist()) | set(np.flatnonzero(keys.slow & required).tolist())
        )
        if not suspects:
            return
        present_set = set(present.tolist())
        for i in suspects:
            pos = int(starts[i])
            phy = seg.start + pos
            candidates = self.cover.files_for(phy)
            if self.cover.quiet.intersection(candidates):
                continue
            file = candidates[-1]
            if not keys.slow[i] and not self.damage.wants(file):
                self.damage.add("index_missing", file, 0, "")  # counted, not listed: no need to decode
                continue
            record = decode_record(view, pos)
            lost = [
                k
                for k in _record_keys(record.properties)
                if (pos << 32) | index_key_hash(f"{record.topic}#{k}") not in present_set
            ]
            if lost:
                self.damage.add(
                    "index_missing",
                    file,
                    0,
                    f"no index entry for key(s) {lost} of the record at commitlog offset {phy} "
                    f"(topic {record.topic!r}): a query by key misses it",
                )

    def skip(self, lo: int, hi: int) -> None:
        """Refs into [lo, hi) are not checked."""
        for refs in (self.queue_refs, self.index_refs):
            refs.done[refs.span(lo, hi)] = True

    def check_outside(self, min_offset: int, segments_end: int) -> None:
        """Refs that no scanned segment covered: reclaimed (fine), in a missing segment, or past the end."""
        for refs in (self.queue_refs, self.index_refs):
            phy = refs["phy"]
            for i in np.flatnonzero(~refs.done & (phy >= min_offset)).tolist():
                p = int(phy[i])
                self._report(
                    refs,
                    i,
                    f"commitlog offset {p} is past the end of the commitlog's segments ({segments_end})"
                    if p >= segments_end
                    else f"commitlog offset {p} is in a missing or unreadable commitlog segment",
                )

    def _file(self, refs: Refs, i: int) -> str:
        names = self.queues.files if refs is self.queue_refs else self.index_files
        return names[int(refs["file"][i])]

    def _report(self, refs: Refs, i: int, what: str) -> None:
        kind = "consume_queue_entry" if refs is self.queue_refs else "index_entry"
        self.damage.add(kind, self._file(refs, i), int(refs["pos"][i]), what)

    def _check_queue_refs(self, view: memoryview, seg: Segment, rel: I64, idx: I64) -> None:
        r = self.queue_refs
        u8 = np.frombuffer(view, dtype=np.uint8)
        try:
            verdict = queue_verdicts(
                u8,
                rel,
                r["size"][idx],
                r["tags"][idx],
                r["qo"][idx],
                r["queue"][idx].astype(np.int64),
                self.topic_bytes,
                self.topic_offsets,
                self.queue_ids,
                self.schedule,
            )
        finally:
            del u8
        for j in np.flatnonzero(verdict != Q_OK).tolist():
            i, pos, v = int(idx[j]), int(rel[j]), int(verdict[j])
            if v != Q_DECODE and not self.damage.wants(self._file(r, i)):
                self._report(r, i, "")  # counted, not listed: no need to decode the record
                continue
            rec = decode_record(view, pos)
            queue = int(r["queue"][i])
            tags = int(r["tags"][i])
            code = tags_code(decode_properties(rec.properties).get(PROPERTY_TAGS))
            if v == Q_DECODE:
                if self.schedule[queue] and (tags > rec.store_timestamp or tags == code):
                    continue
                if not self.schedule[queue] and tags == code:
                    continue
                v = Q_DELIVERY if self.schedule[queue] else Q_TAGS
            self._report(
                r,
                i,
                _queue_mismatch(
                    v,
                    seg.start + pos,
                    rec,
                    int(r["size"][i]),
                    int(r["qo"][i]),
                    tags,
                    code,
                    self.queues.topics[queue],
                    self.queues.queue_ids[queue],
                ),
            )

    def _check_index_refs(
        self, view: memoryview, seg: Segment, rel: I64, idx: I64, keys: _SegmentKeys
    ) -> None:
        r = self.index_refs
        found = _members(keys.sorted_pairs, (rel << 32) | r["key_hash"][idx].astype(np.int64))
        slow = keys.slow[np.searchsorted(keys.starts, rel)]  # every ref here is at a record start
        verdict = np.where(found, _K_MATCH, np.where(slow, _K_DECODE, _K_NONE))
        for j in np.flatnonzero(verdict != _K_MATCH).tolist():
            i, pos = int(idx[j]), int(rel[j])
            if verdict[j] == _K_NONE and not self.damage.wants(self._file(r, i)):
                self._report(r, i, "")  # counted, not listed: no need to decode the record
                continue
            rec = decode_record(view, pos)
            names = _record_keys(rec.properties)
            key_hash = int(r["key_hash"][i])
            if verdict[j] == _K_DECODE and key_hash in {index_key_hash(f"{rec.topic}#{k}") for k in names}:
                continue
            self._report(
                r,
                i,
                f"keyHash {key_hash} matches no key of the record at commitlog offset {seg.start + pos} "
                f"(topic {rec.topic!r}, keys {names})",
            )


class _SegmentKeys:
    """The keys dispatch indexes for each record of a segment (``record_key_hashes``), as
    ``(position << 32) | keyHash`` pairs: what the index entries into the segment are checked
    against, and what they must all be found among."""

    def __init__(self, view: memoryview, starts: I64) -> None:
        u8 = np.frombuffer(view, dtype=np.uint8)
        try:
            self.record, hashes, self.slow, self.rollback = record_key_hashes(u8, starts)
        finally:
            del u8
        self.starts = starts
        self.pairs = (starts[self.record] << 32) | hashes
        self.sorted_pairs = np.sort(self.pairs)


def _members(sorted_values: I64, values: I64) -> npt.NDArray[np.bool_]:
    """Which of ``values`` are in ``sorted_values`` (a binary search each: np.isin sorts both)."""
    if not len(sorted_values):
        return np.zeros(len(values), dtype=np.bool_)
    at = np.minimum(np.searchsorted(sorted_values, values), len(sorted_values) - 1)
    found: npt.NDArray[np.bool_] = sorted_values[at] == values
    return found


def _record_keys(properties: str) -> list[str]:
    """The keys dispatch indexes for a record: UNIQ_KEY, then each space-separated KEYS."""
    props = decode_properties(properties)
    keys = [props[PROPERTY_UNIQ_KEY]] if PROPERTY_UNIQ_KEY in props else []
    return keys + split_keys(props.get(PROPERTY_KEYS))


def _queue_mismatch(
    verdict: int,
    phy: int,
    rec: DecodedRecord,
    size: int,
    qo: int,
    tags: int,
    code: int,
    topic: str,
    queue_id: int,
) -> str:
    if verdict == Q_SIZE:
        return f"size {size}, but the record at commitlog offset {phy} is {rec.total_size} bytes"
    if verdict == Q_TOPIC:
        return f"the record at commitlog offset {phy} is of topic {rec.topic!r}, not {topic!r}"
    if verdict == Q_QUEUE_ID:
        return f"the record at commitlog offset {phy} is of queue {rec.queue_id}, not {queue_id}"
    if verdict == Q_QUEUE_OFFSET:
        return (
            f"entry of queue offset {qo}, but the record at commitlog offset {phy} has queue offset "
            f"{rec.queue_offset}"
        )
    if verdict == Q_DELIVERY:
        return (
            f"tagsCode {tags} (delivery time) is not after the store time {rec.store_timestamp} of the "
            f"record at commitlog offset {phy}"
        )
    return f"tagsCode {tags}, but the tags of the record at commitlog offset {phy} hash to {code}"


def _locate(rel: I64, starts: I64, unparsed: list[tuple[int, int]], seg: Segment) -> npt.NDArray[np.int8]:
    """For positions within a segment: at a record start, in unparseable bytes, where no record
    is (zero fill, the BLANK filler, past the file's end), or inside a record."""
    where = np.full(len(rel), _INSIDE, dtype=np.int8)
    k = np.searchsorted(starts, rel)
    at = k < len(starts)
    at[at] = starts[k[at]] == rel[at]
    if seg.ending == "blank":
        where[rel >= seg.valid_end] = _NO_RECORD
    elif seg.ending == "zeros":
        where[rel >= seg.zero_at] = _NO_RECORD
    where[rel >= seg.size] = _NO_RECORD
    if unparsed:
        lo = np.array([a for a, _ in unparsed], dtype=np.int64)
        hi = np.array([b for _, b in unparsed], dtype=np.int64)
        j = np.searchsorted(lo, rel, side="right") - 1
        inside = j >= 0
        inside[inside] = rel[inside] < hi[j[inside]]
        where[inside] = _UNPARSED
    where[at] = _AT_RECORD
    return where


def _misplaced(view: memoryview, seg: Segment, starts: I64, rel: int, where: int) -> str:
    phy = seg.start + rel
    if where == _NO_RECORD:
        if rel >= seg.size:
            return f"commitlog offset {phy} is past the end of segment file {seg.rel} ({seg.size} bytes)"
        if seg.ending == "blank":
            return f"commitlog offset {phy} is in the BLANK filler at the end of its segment: no record there"
        return f"commitlog offset {phy} holds no record (zero fill from {seg.start + seg.zero_at})"
    k = int(np.searchsorted(starts, rel)) - 1
    if k >= 0:
        before = int(starts[k])
        total = int(record_fields(view, starts[k : k + 1])["total_size"][0])
        if rel < before + total:
            return (
                f"commitlog offset {phy} is inside the record at {seg.start + before} ({total} bytes), "
                "not at its start"
            )
    return f"commitlog offset {phy} is not the start of a record"
