"""Checking a store directory without changing it: the engine of ``rocketstore verify``.

Every file is opened read-only (``mmap.ACCESS_READ``); the lock is not taken and nothing is
written (no abort file, no recovery), so a store another process has open, or a damaged one, can
be checked as it is. Corrupt bytes never raise: each length or offset read from a file is
bounded before it is used, each walk moves strictly forward, and whatever is wrong becomes a
``Damage`` (kind, file relative to the store root, offset, one line of detail).

What is checked, in this order::

    consumequeue/{topic}/{queueId}/{file}   20-byte entries (codec.consume_queue_entry)
      - file size = consume_queue_entries * 20, name = its first byte (a multiple of the size),
        files contiguous                                   file_size, file_name, missing_file
      - a queue's entries run up to its first all-zero entry (unwritten space); a non-zero entry
        after zero entries marks a hole (recovery rebuilds it)   consume_queue_entry
      - leading fillPreBlank entries (0, 0x7FFFFFFF, 0) of the first file are skipped; every
        other entry has offset >= 0 and size > 0                consume_queue_entry
    index/{yyyyMMddHHmmssSSS}               codec.index_layout
      - size = 40 + 4 * slots + 20 * entries                    file_size
      - header: indexCount in 1..entries (0 reads as 1, as RocketMQ does), hashSlotCount <= slots
                                                                index_header
      - every slot names an entry below indexCount; every prevIndex is below its own entry's
        number (so chains strictly decrease) and links to an entry of the same slot; every
        used entry is reachable from its slot keyHash % slots      index_chain
      - keyHash >= 0, timeDiff >= 0, phyOffset >= 0            index_entry
    commitlog/{20-digit offset}             codec.commitlog_record
      - segment size, name = start offset (a multiple of the size), segments contiguous
                                                                file_size, file_name, missing_file
      - each segment scanned from byte 0 with ``scan_extent`` (a segment always parses on its
        own): an invalid record is reported at its global offset with decode_record's reason;
        a BLANK record must fill the segment exactly              commitlog_record
      - zero fill ends a segment's data; only the last segment holding data may end that way
        without a BLANK record, and nothing non-zero may follow zero fill   commitlog_gap
      - every file but the newest is full (a file is only followed by another once full: an emptied
        or zero-filled one lost its entries)                     index_header
    checkpoint                               4096 bytes          file_size
    anywhere: links are not followed; a store file that is not a regular file, or a store
    directory that is not a real directory, is reported and not read      file_type

Then every pointer into the commitlog gathered from the queues and the index is checked against
the record it names (pointers below the commitlog's first segment are reclaimed: not damage):

- a consume-queue entry must name the START of a valid record whose TOTALSIZE is the entry's
  size, whose topic and queue id are the queue's directory names, whose QUEUEOFFSET is the
  entry's position (entry i of file F is queue offset F.start // 20 + i), and whose tags hash to
  the entry's tagsCode (in SCHEDULE_TOPIC_XXXX the tagsCode is the delivery time: it must lie
  after the store time);                                      consume_queue_entry
- an index entry must name the start of a valid record one of whose keys (UNIQ_KEY, and each
  space-separated KEYS) hashes, as ``topic#key``, to the entry's keyHash.       index_entry

And the other way round, every key must be found through the index: each key dispatch indexes
(UNIQ_KEY, each KEYS word, as ``topic#key``) of each valid record the index covers must have an
entry naming that record with that keyHash, in the index file whose range holds the record
(``IndexCover``): after a clean shutdown (no ``abort``) every record; otherwise those up to the
newest indexed one and those stored before the checkpoint's index time. ROLLBACK records are left
out (RocketMQ does not index them), and so are the records of index files already reported
damaged (their keys being missing says nothing new).                               index_missing

A pointer into bytes that could not be parsed (after a corrupt record, until the scan finds the
next record start again) is not reported: the commitlog damage already covers it. A pointer
into zero fill, into a missing segment or past the last one is reported.

A store being written. Queues and index are read before the commitlog: dispatch follows the
append, so every entry read points at a record that exists by the time the commitlog scan gets
there. Where a writer works, what looks damaged is looked at again before it is reported: the
newest file of each queue is read twice and only what both reads agree on is checked (a copy
can land in any byte order); the tail of the last two segments (a record half copied in, zero
fill a record is landing on) and a segment that ended in zero fill (the writer may have closed
it with a BLANK record since) are scanned again; index slots past the header's count are read
again (the writer updates the header last).

After a corrupt record the scan resumes at the next position holding a MESSAGE magic code whose
PHYSICALOFFSET field names that very position: a record start, so one damaged record does not
hide the rest of its segment.

Cost. Records are validated by the compiled ``scan_extent`` walk (CRC included). Pointers are
checked with compiled kernels that read the few fields they need straight from the mapped
segment (TOTALSIZE, QUEUEID at +12, QUEUEOFFSET at +20, STORETIMESTAMP, the topic bytes, the
TAGS / KEYS / UNIQ_KEY properties, Java's hash over their UTF-16 code units), no per-record
Python work: only values that are not strict UTF-8 go through ``decode_record`` and
``decode_properties`` to be hashed exactly as dispatch hashed them. The keys of a segment's
records are hashed once (``_SegmentKeys``); index entries are checked against them and they
against the entries by binary search over sorted ``(position << 32) | keyHash`` pairs. About
0.9 s per million records of 100 B with a consume-queue entry and two index entries each, CRC
included (the CRC is 0.2 s of it), before the every-key check; that check added about a quarter
(measured on a loaded 2-core machine: 6.6 s -> 8.4 s for a million records). Memory: about 50
bytes per consume-queue entry and 25 per index entry gathered (twice that while they are sorted),
about 60 per entry of the index file being checked, 8 per record of the segment being scanned, and
24 per key of that segment's records. At most ``MAX_DAMAGE_PER_FILE`` problems are listed per
file; one more line counts the rest.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import numba
import numpy as np
import numpy.typing as npt

from rocketstore.codec import index_layout
from rocketstore.codec.big_endian import read_i32 as _be32
from rocketstore.codec.big_endian import read_i64 as _be64
from rocketstore.codec.checkpoint import CHECKPOINT_FILE_SIZE, decode_checkpoint
from rocketstore.codec.commitlog_record import (
    MESSAGE_MAGIC_V1,
    MESSAGE_MAGIC_V2,
    DecodedRecord,
    decode_record,
)
from rocketstore.codec.commitlog_scan import find_record_start as _find_record_start
from rocketstore.codec.commitlog_scan import message_starts, scan_extent, store_timestamps
from rocketstore.codec.commitlog_scan import record_layout as _layout
from rocketstore.codec.consume_queue_entry import CQ_ENTRY_SIZE
from rocketstore.codec.consume_queue_entry import ENTRY_DTYPE as CQ_ENTRY_DTYPE
from rocketstore.codec.java_hash import index_hash_of as _index_hash
from rocketstore.codec.java_hash import index_key_hash, tags_code
from rocketstore.codec.java_hash import java_hash_utf8 as _hash_utf8
from rocketstore.codec.java_hash import signed32 as _signed32
from rocketstore.codec.properties import decode_properties
from rocketstore.codec.properties import property_span as _property
from rocketstore.config import StoreConfig
from rocketstore.errors import StorePathError
from rocketstore.geometry import survey_geometry
from rocketstore.message import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, SCHEDULE_TOPIC
from rocketstore.storage.file_view import mapped_readonly
from rocketstore.storage.paths import (
    StoreEntry,
    StoreLayout,
    is_index_name,
    is_segment_name,
    list_store_dir,
    parse_queue_id,
    segment_name,
    store_file_exists,
)
from rocketstore.store_lock import lock_holder

__all__ = ["DAMAGE_KINDS", "MAX_DAMAGE_PER_FILE", "Damage", "VerifyReport", "verify_store"]

DAMAGE_KINDS: Final = (
    "file_size",
    "file_name",
    "missing_file",
    "commitlog_record",
    "commitlog_gap",
    "consume_queue_entry",
    "index_header",
    "index_chain",
    "index_entry",
    "index_missing",
)
MAX_DAMAGE_PER_FILE: Final = 100

Progress = Callable[[str, int, int], None]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
_TRANSIENT_SUFFIXES: Final = (".creating", ".tmp")  # a writer's files being created: not part of the store
_PRE_BLANK_SIZE: Final = 0x7FFFFFFF  # fillPreBlank entry: (0, Integer.MAX_VALUE, 0)
_TOTAL_SIZE = struct.Struct(">i")
_LIVE_RETRIES: Final = 4  # looks again at the tail of a segment a writer may be appending to


@dataclass(frozen=True)
class Damage:
    """One thing wrong in a store. ``offset`` is a global commitlog offset for commitlog damage
    (records, gaps, segment files), a byte position within ``file`` otherwise."""

    kind: str
    file: str
    offset: int
    detail: str

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "file": self.file, "offset": self.offset, "detail": self.detail}


@dataclass(frozen=True)
class VerifyReport:
    damage: list[Damage]
    records: int  # valid commitlog records
    queue_entries: int  # consume-queue entries checked (fillPreBlank padding and unwritten space excluded)
    index_entries: int  # used index entries checked
    commitlog_range: tuple[int, int]  # (min offset, end of valid data), as recovery counts them

    @property
    def clean(self) -> bool:
        return not self.damage

    def to_dict(self) -> dict[str, object]:
        return {
            "clean": self.clean,
            "records": self.records,
            "queue_entries": self.queue_entries,
            "index_entries": self.index_entries,
            "commitlog_range": list(self.commitlog_range),
            "damage": [d.to_dict() for d in self.damage],
        }


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
    cfg = _geometry(paths, config)
    damage = _DamageLog()
    tick: Progress = progress or _no_progress
    queues = _Queues()
    queue_refs = _queue_refs()
    queue_entries = _read_consume_queues(paths, cfg, queues, queue_refs, damage, tick)
    index_files: list[str] = []
    index_refs = _index_refs()
    cover = index_cover(paths, cfg, damage)  # before the entries: a writer updates headers last
    index_entries = _read_index_files(paths, cfg, index_files, index_refs, damage, tick)
    cover = cover.quieting(damage)
    checker = _PointerCheck(queues, queue_refs, index_files, index_refs, damage, cover)
    records, commitlog_range = _check_commitlog(paths, cfg, check_crc, checker, damage, tick)
    _check_checkpoint(paths, damage)
    _check_config_dir(paths, damage)
    return VerifyReport(damage.result(), records, queue_entries, index_entries, commitlog_range)


def _no_progress(stage: str, done: int, total: int) -> None:
    pass


# --- plumbing -------------------------------------------------------------------------------
class _DamageLog:
    """Collects damage, listing at most MAX_DAMAGE_PER_FILE per file and counting the rest, so a
    file of garbage yields a readable report."""

    def __init__(self) -> None:
        self._items: list[Damage] = []
        self._per_file: Counter[str] = Counter()
        self._unlisted: dict[str, Damage] = {}

    def files(self) -> set[str]:
        """The files with damage added so far."""
        return set(self._per_file)

    def wants(self, file: str) -> bool:
        return self._per_file[file] < MAX_DAMAGE_PER_FILE

    def add(self, kind: str, file: str, offset: int, detail: str) -> None:
        n = self._per_file[file]
        self._per_file[file] = n + 1
        if n < MAX_DAMAGE_PER_FILE:
            self._items.append(Damage(kind, file, offset, detail))
        elif file not in self._unlisted:
            self._unlisted[file] = Damage(kind, file, offset, "")

    def add_each(self, kind: str, file: str, offsets: npt.ArrayLike, detail: Callable[[int], str]) -> None:
        """One damage per element ``i`` of ``offsets``, described by ``detail(i)`` (called only for
        those that are listed)."""
        where = np.asarray(offsets, dtype=np.int64)
        for i in range(len(where)):
            if not self.wants(file):
                self._per_file[file] += len(where) - i - 1
                self.add(kind, file, int(where[i]), "")
                return
            self.add(kind, file, int(where[i]), detail(i))

    def per_file(self) -> dict[str, tuple[list[Damage], int]]:
        """Per file: the damage listed, then the first one not listed (in the order added), and how
        many were added in all. What ``absorb`` needs to merge logs kept apart (one per worker)."""
        out: dict[str, tuple[list[Damage], int]] = {}
        for d in self._items:
            out.setdefault(d.file, ([], 0))[0].append(d)
        for file, first in self._unlisted.items():
            out.setdefault(file, ([], 0))[0].append(first)
        return {file: (items, self._per_file[file]) for file, (items, _) in out.items()}

    def absorb(self, part: dict[str, tuple[list[Damage], int]]) -> None:
        """Add another log's ``per_file``, as if its damage had been added here, after this log's."""
        for file, (items, count) in part.items():
            for d in items:
                self.add(d.kind, file, d.offset, d.detail)
            self._per_file[file] += count - len(items)

    def result(self) -> list[Damage]:
        items = list(self._items)
        for file, first in self._unlisted.items():
            more = self._per_file[file] - MAX_DAMAGE_PER_FILE
            items.append(
                Damage(first.kind, file, first.offset, f"{more} more problems in this file, not listed")
            )
        return sorted(items, key=lambda d: (d.file, d.offset, d.kind))


def _entries(paths: StoreLayout, directory: Path, damage: _DamageLog) -> list[StoreEntry]:
    """The entries of a store directory (links not followed); something other than a real
    directory there is damage, and read as empty."""
    try:
        return list_store_dir(directory)
    except StorePathError as exc:
        _wrong_kind(paths, directory, exc.found, exc.expected, damage)
        return []


def _wrong_kind(paths: StoreLayout, path: Path, found: str, expected: str, damage: _DamageLog) -> None:
    damage.add("file_type", _rel(paths, path), 0, f"{found} where {expected} belongs; not read")


def _named_files(
    paths: StoreLayout, directory: Path, damage: _DamageLog
) -> tuple[list[tuple[int, Path]], list[Path]]:
    """(segment files by offset, other entries) of a directory of 20-digit-named files; an entry
    named like a segment that is not a regular file is reported here."""
    named: list[tuple[int, Path]] = []
    strays: list[Path] = []
    for e in _entries(paths, directory, damage):
        if e.name.endswith(_TRANSIENT_SUFFIXES):
            continue
        if not is_segment_name(e.name):
            strays.append(e.path)
        elif e.is_file:
            named.append((int(e.name), e.path))
        else:
            _wrong_kind(paths, e.path, e.kind, "a regular file (a segment)", damage)
    return sorted(named), strays


def _rel(paths: StoreLayout, p: Path) -> str:
    return p.relative_to(paths.root).as_posix()


class _Refs:
    """Pointers into the commitlog read from queue or index files, one numpy column per field,
    sorted by commitlog offset (column ``phy``) once ``seal`` is called."""

    def __init__(self, **dtypes: type[np.integer[Any]]) -> None:
        self._dtypes = dtypes
        self._parts: dict[str, list[npt.NDArray[Any]]] = {name: [] for name in dtypes}
        self.cols: dict[str, npt.NDArray[Any]] = {}
        self.done = np.zeros(0, dtype=bool)

    def add(self, **cols: npt.ArrayLike) -> None:
        n = len(np.asarray(cols["phy"]))
        for name, dtype in self._dtypes.items():
            self._parts[name].append(np.broadcast_to(np.asarray(cols[name], dtype=dtype), (n,)))

    def seal(self) -> None:
        cols = {
            name: np.concatenate(parts) if parts else np.zeros(0, dtype=self._dtypes[name])
            for name, parts in self._parts.items()
        }
        self._parts = {}
        # each queue's and each index file's offsets are sorted runs: the stable sort merges them
        order = np.argsort(cols["phy"], kind="stable")
        self.cols = {name: col[order] for name, col in cols.items()}
        self.done = np.zeros(len(order), dtype=bool)

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        return self.cols[name]

    def span(self, lo: int, hi: int) -> slice:
        """The refs pointing into [lo, hi)."""
        phy = self.cols["phy"]
        return slice(int(np.searchsorted(phy, lo)), int(np.searchsorted(phy, hi)))


# --- geometry -------------------------------------------------------------------------------
def _geometry(paths: StoreLayout, config: StoreConfig | None) -> StoreConfig:
    """``config``, else the geometry most of the files were written with (where they disagree,
    the checks report the odd ones)."""
    return config if config is not None else survey_geometry(paths.root)[0]


# --- consume queues -------------------------------------------------------------------------
@dataclass
class _Queues:
    """The queues found, by number (directory topic and queue id), and the files read, by number."""

    topics: list[str] = field(default_factory=list)
    queue_ids: list[int] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def arrays(self) -> tuple[npt.NDArray[np.uint8], I64, I64, npt.NDArray[np.bool_]]:
        """Topic bytes (concatenated), their offsets, queue ids, and which are SCHEDULE_TOPIC_XXXX."""
        names = [os.fsencode(t) for t in self.topics]
        offsets = np.zeros(len(names) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(n) for n in names])
        topic_bytes = np.frombuffer(b"".join(names) or b"\0", dtype=np.uint8)
        # a queue id that no int32 can hold never matches a record's QUEUEID
        ids = np.array([q if -(1 << 31) <= q < 1 << 31 else 1 << 40 for q in self.queue_ids], dtype=np.int64)
        schedule = np.array([t == SCHEDULE_TOPIC for t in self.topics], dtype=bool)
        return topic_bytes, offsets, ids, schedule


def _queue_refs() -> _Refs:
    return _Refs(
        phy=np.int64, size=np.int64, tags=np.int64, qo=np.int64, queue=np.int32, file=np.int32, pos=np.int64
    )


def _index_refs() -> _Refs:
    return _Refs(phy=np.int64, key_hash=np.int32, file=np.int32, pos=np.int64)


def _read_consume_queues(
    paths: StoreLayout, cfg: StoreConfig, queues: _Queues, refs: _Refs, damage: _DamageLog, tick: Progress
) -> int:
    """Check each queue's files on their own and gather their entries as refs; returns how many
    entries were checked."""
    found = _find_queues(paths, damage)
    total = sum(len(files) for *_, files in found)
    done = checked = 0
    tick("consumequeue", 0, total)
    for topic, queue_id, queue_dir, files in found:
        queues.topics.append(topic)
        queues.queue_ids.append(queue_id)
        checked += _read_queue(paths, cfg, queue_dir, files, len(queues.topics) - 1, queues, refs, damage)
        done += len(files)
        tick("consumequeue", done, total)
    refs.seal()
    return checked


_FoundQueue = tuple[str, int, Path, list[tuple[int, Path]]]  # topic, queue id, directory, files by offset


def _find_queues(paths: StoreLayout, damage: _DamageLog) -> list[_FoundQueue]:
    """Every queue directory ``{topic}/{queueId}`` and its files; anything else is reported."""
    found: list[_FoundQueue] = []
    root = paths.consume_queue
    for topic_dir in _entries(paths, root, damage):
        if not topic_dir.is_dir:
            _wrong_kind(paths, topic_dir.path, topic_dir.kind, "a topic directory", damage)
            continue
        for queue_dir in _entries(paths, topic_dir.path, damage):
            queue_id = parse_queue_id(queue_dir.name)
            if queue_id is None:
                damage.add("file_name", _rel(paths, queue_dir.path), 0, "not a queue directory (a queue id)")
            elif not queue_dir.is_dir:
                _wrong_kind(paths, queue_dir.path, queue_dir.kind, "a queue directory", damage)
            else:
                files, strays = _named_files(paths, queue_dir.path, damage)
                for p in strays:
                    damage.add("file_name", _rel(paths, p), 0, "not a consume-queue file (20-digit name)")
                found.append((topic_dir.name, queue_id, queue_dir.path, files))
    return found


def _read_queue(
    paths: StoreLayout,
    cfg: StoreConfig,
    queue_dir: Path,
    files: list[tuple[int, Path]],
    queue: int,
    queues: _Queues,
    refs: _Refs,
    damage: _DamageLog,
) -> int:
    """One queue's files in order: names, sizes, contiguity, then each file's entries."""
    file_size = cfg.consume_queue_entries * CQ_ENTRY_SIZE
    checked = 0
    expect: int | None = None
    after_zero = False  # the last entry read was unwritten (all zero)
    for k, (start, path) in enumerate(files):
        rel = _rel(paths, path)
        if start % file_size:
            damage.add(
                "file_name", rel, 0, f"{start} is not a multiple of the file size {file_size}; not read"
            )
            continue
        if expect is not None and start != expect:
            damage.add(
                "missing_file",
                _rel(paths, queue_dir / segment_name(expect)),
                0,
                f"consume-queue files missing for queue offsets {expect // CQ_ENTRY_SIZE}.."
                f"{start // CQ_ENTRY_SIZE - 1}",
            )
        first = expect is None
        expect = start + file_size
        try:
            with mapped_readonly(path) as view:
                if len(view) != file_size:
                    damage.add(
                        "file_size",
                        rel,
                        min(len(view), file_size),
                        f"{len(view)} bytes, expected {file_size}",
                    )
                entries = _stable_entries(
                    view, min(len(view), file_size) // CQ_ENTRY_SIZE, being_written=k == len(files) - 1
                )
                off = entries["offset"].astype(np.int64)
                size = entries["size"].astype(np.int64)
                tags = entries["tags_code"].astype(np.int64)
                del entries
        except FileNotFoundError:
            continue  # reclaimed while we looked
        queues.files.append(rel)
        n, after_zero = _read_queue_entries(
            off, size, tags, start, first, after_zero, queue, len(queues.files) - 1, rel, refs, damage
        )
        checked += n
    return checked


def _stable_entries(view: memoryview, n: int, *, being_written: bool) -> npt.NDArray[np.void]:
    """The first ``n`` entries of a queue file. The newest file of a queue may be being appended
    to, and a copy can land in any byte order: that file is read twice and only what both reads
    agree on, up to the first difference, is taken (what follows is newer than this check)."""
    first = np.frombuffer(view, dtype=np.uint8, count=n * CQ_ENTRY_SIZE).copy()
    if being_written:
        again = np.frombuffer(view, dtype=np.uint8, count=n * CQ_ENTRY_SIZE)
        differ = np.flatnonzero(first != again)
        del again
        if len(differ):
            n = int(differ[0]) // CQ_ENTRY_SIZE
    entries: npt.NDArray[np.void] = first[: n * CQ_ENTRY_SIZE].view(CQ_ENTRY_DTYPE)
    return entries


def _read_queue_entries(
    off: I64,
    size: I64,
    tags: I64,
    start: int,
    first: bool,
    after_zero: bool,
    queue: int,
    fid: int,
    rel: str,
    refs: _Refs,
    damage: _DamageLog,
) -> tuple[int, bool]:
    """Check one file's entries and gather the valid ones as refs: (entries checked, whether the
    file ends in unwritten entries)."""
    lead = 0
    if first:  # fillPreBlank padding of a queue whose first file starts past queue offset 0
        pre_blank = (off == 0) & (size == _PRE_BLANK_SIZE) & (tags == 0)
        lead = len(off) if pre_blank.all() else int(np.argmin(pre_blank))
    written = ((off != 0) | (size != 0) | (tags != 0))[lead:]
    if len(written) == 0:
        return 0, after_zero
    follows_zero = np.concatenate(([after_zero], ~written[:-1])) & written
    damage.add_each(
        "consume_queue_entry",
        rel,
        (lead + np.flatnonzero(follows_zero)) * CQ_ENTRY_SIZE,
        lambda i: (
            "entry after unwritten (all-zero) entries: the zero entries are a hole (recovery "
            "rebuilds them from the commitlog; readers meanwhile miss those messages)"
        ),
    )
    valid = written & (off[lead:] >= 0) & (size[lead:] > 0)
    bad = lead + np.flatnonzero(written & ~valid)
    damage.add_each(
        "consume_queue_entry",
        rel,
        bad * CQ_ENTRY_SIZE,
        lambda i: (
            f"invalid entry: commitlog offset {off[bad[i]]}, size {size[bad[i]]} "
            "(recovery ends the queue here)"
        ),
    )
    sel = lead + np.flatnonzero(valid)
    refs.add(
        phy=off[sel],
        size=size[sel],
        tags=tags[sel],
        qo=start // CQ_ENTRY_SIZE + sel,
        queue=queue,
        file=fid,
        pos=sel * CQ_ENTRY_SIZE,
    )
    return int(np.count_nonzero(written)), not written[-1]


# --- index files ----------------------------------------------------------------------------


def _read_index_files(
    paths: StoreLayout, cfg: StoreConfig, names: list[str], refs: _Refs, damage: _DamageLog, tick: Progress
) -> int:
    files = _find_index_files(paths, damage)
    checked = 0
    tick("index", 0, len(files))
    for i, path in enumerate(files):
        with contextlib.suppress(FileNotFoundError):  # reclaimed while we looked
            checked += _read_index_file(path, _rel(paths, path), cfg, names, refs, damage)
        tick("index", i + 1, len(files))
    refs.seal()
    return checked


def _find_index_files(paths: StoreLayout, damage: _DamageLog) -> list[Path]:
    """The index files, oldest first; anything else in ``index/`` is reported."""
    files: list[Path] = []
    for e in _entries(paths, paths.index, damage):
        if e.name.endswith(_TRANSIENT_SUFFIXES):
            continue
        if not is_index_name(e.name):
            damage.add(
                "file_name", _rel(paths, e.path), 0, "not an index file (17-digit yyyyMMddHHmmssSSS name)"
            )
        elif e.is_file:
            files.append(e.path)
        else:
            _wrong_kind(paths, e.path, e.kind, "a regular file (an index file)", damage)
    return files


def _read_index_file(
    path: Path, rel: str, cfg: StoreConfig, names: list[str], refs: _Refs, damage: _DamageLog
) -> int:
    slots, max_entries = cfg.index_hash_slots, cfg.index_max_entries
    expected = index_layout.file_size(slots, max_entries)
    with mapped_readonly(path) as view:
        if len(view) != expected:
            damage.add(
                "file_size",
                rel,
                min(len(view), expected),
                f"{len(view)} bytes, expected {expected} ({index_layout.HEADER_SIZE}-byte header, "
                f"{slots} slots, {max_entries} entries); not read",
            )
            return 0
        for _ in range(2):
            header = index_layout.decode_header(view)
            count = header.index_count or 1  # a file created but never written reads as 0, as in RocketMQ
            heads = np.frombuffer(
                view, dtype=index_layout.SLOT_DTYPE, count=slots, offset=index_layout.HEADER_SIZE
            ).astype(np.int64)
            if not (heads >= count).any():
                break
            # a writer between its slots and its header (or damage): read once more
        if not 1 <= count <= max_entries:
            damage.add(
                "index_header", rel, 36, f"indexCount {count} is outside 1..{max_entries}; entries not read"
            )
            return 0
        if not 0 <= header.hash_slot_count <= slots:
            damage.add(
                "index_header", rel, 32, f"hashSlotCount {header.hash_slot_count} is outside 0..{slots}"
            )
        entries = np.frombuffer(
            view, dtype=index_layout.ENTRY_DTYPE, count=count, offset=index_layout.entry_position(slots, 0)
        )
        key_hash = entries["key_hash"].astype(np.int32)
        phy = entries["phy_offset"].astype(np.int64)
        time_diff = entries["time_diff"].astype(np.int32)
        prev = entries["prev_index"].astype(np.int32)
        del entries
    fid = len(names)
    names.append(rel)
    _check_chains(rel, slots, count, heads, key_hash, prev, damage)
    used = np.arange(1, count)
    position = index_layout.entry_position(slots, 0) + used * index_layout.ENTRY_SIZE
    bad_hash = key_hash[1:] < 0
    damage.add_each(
        "index_entry", rel, position[bad_hash], lambda i: f"negative keyHash {key_hash[1:][bad_hash][i]}"
    )
    bad_time = time_diff[1:] < 0
    damage.add_each(
        "index_entry",
        rel,
        position[bad_time],
        lambda i: f"negative timeDiff {time_diff[1:][bad_time][i]}: time-bounded queries stop at it",
    )
    bad_phy = phy[1:] < 0
    damage.add_each(
        "index_entry", rel, position[bad_phy], lambda i: f"negative phyOffset {phy[1:][bad_phy][i]}"
    )
    keep = ~bad_hash & ~bad_phy
    refs.add(phy=phy[1:][keep], key_hash=key_hash[1:][keep], file=fid, pos=position[keep])
    return count - 1


@dataclass(frozen=True)
class IndexCover:
    """What the index files cover, for the check that every key can be found through them: each
    key (UNIQ_KEY and every KEYS word) of each record at or below ``complete_through`` (a commitlog
    offset; -1 for none) must have its entry. That is every record after a clean shutdown (no
    ``abort``: dispatch and the index were drained), else every record up to the newest indexed
    one. ROLLBACK records are left out: RocketMQ does not index them."""

    files: list[str] = field(default_factory=list)  # relative names, oldest first
    begins: list[int] = field(default_factory=list)  # beginPhyOffset of each (-1: empty file)
    ends: list[int] = field(default_factory=list)  # endPhyOffset of each (-1: empty file)
    complete_through: int = -1
    indexed_before: int = 0  # and every record stored before this time (the checkpoint's index time)
    quiet: frozenset[str] = frozenset()  # files whose damage is reported already: not their keys too

    def quieting(self, damage: _DamageLog) -> IndexCover:
        """This cover, with the index files ``damage`` already names made quiet."""
        return replace(self, quiet=frozenset(f for f in damage.files() if f in self.files))

    def files_for(self, phy: int) -> tuple[str, ...]:
        """The index files that should hold the keys of the record at ``phy``: the one whose
        range covers it (and the next one, when the record ends it: keys that did not fit go
        there), else the empty file that comes after the files ending before it, else the newest."""
        for i, (name, begin, end) in enumerate(zip(self.files, self.begins, self.ends)):
            if phy == end and i + 1 < len(self.files):
                return name, self.files[i + 1]
            if end < 0 or begin <= phy <= end or begin > phy:
                return (name,)
        return (self.files[-1],)


def index_cover(paths: StoreLayout, cfg: StoreConfig, damage: _DamageLog) -> IndexCover:
    """Read the index headers; report every file but the newest that is not full (a file is only
    followed by another once it is full: a zero-filled or emptied file is damage)."""
    files = _find_index_files(paths, _DamageLog())  # strays are reported by _read_index_files
    max_entries = cfg.index_max_entries
    expected = index_layout.file_size(cfg.index_hash_slots, max_entries)
    cover = IndexCover()
    for i, path in enumerate(files):
        rel = _rel(paths, path)
        try:
            with mapped_readonly(path) as view:
                whole = len(view) == expected  # else reported by _read_index_file
                header = index_layout.decode_header(view) if len(view) >= index_layout.HEADER_SIZE else None
        except FileNotFoundError:
            continue
        if header is None:
            header = index_layout.IndexHeader()
        count = header.index_count or 1
        if whole and i < len(files) - 1 and count < max_entries:
            damage.add(
                "index_header",
                rel,
                36,
                f"indexCount {count} of {max_entries}, but a newer index file follows (a file is only "
                "followed by another once full): its entries are missing",
            )
        used = count > 1 and 1 <= count <= max_entries
        cover.files.append(rel)
        cover.begins.append(header.begin_phy_offset if used else -1)
        cover.ends.append(header.end_phy_offset if used else -1)
    if cover.files:
        clean = not paths.abort.exists()
        # Beside a live writer, index files may appear after ours were listed: the checkpoint may
        # speak of them, and the keys of the record ending the newest listed file that did not
        # fit in it are in the next. Only what the files read must hold is checked then.
        live = lock_holder(paths.lock) not in (None, os.getpid())
        cover = replace(
            cover,
            complete_through=1 << 62 if clean else max(cover.ends) - (1 if live else 0),
            indexed_before=0 if live else _checkpoint_index_time(paths),
        )
    return cover


def _checkpoint_index_time(paths: StoreLayout) -> int:
    """The checkpoint's indexMsgTimestamp: every record stored before it was indexed (0 if unknown)."""
    if not paths.checkpoint.is_file():
        return 0
    try:
        with mapped_readonly(paths.checkpoint) as view:
            if len(view) != CHECKPOINT_FILE_SIZE:
                return 0
            return decode_checkpoint(view).index_msg_timestamp
    except FileNotFoundError:
        return 0


def _check_chains(
    rel: str, slots: int, count: int, heads: I64, key_hash: I32, prev: I32, damage: _DamageLog
) -> None:
    """Slots, links and reachability of one index file's hash chains (see the module docstring)."""
    entries_at = index_layout.entry_position(slots, 0)
    slot_ids = np.arange(slots, dtype=np.int64)
    bad_head = (heads < 0) | (heads >= count)
    where = np.flatnonzero(bad_head)
    damage.add_each(
        "index_chain",
        rel,
        index_layout.HEADER_SIZE + where * index_layout.SLOT_SIZE,
        lambda i: f"hash slot {where[i]} points at entry {heads[where[i]]}, but indexCount is {count}",
    )
    slot_of = np.where(key_hash >= 0, key_hash % slots, -1)
    head = np.where(bad_head, 0, heads)
    wrong_head = np.flatnonzero((head > 0) & (slot_of[head] != slot_ids))
    damage.add_each(
        "index_chain",
        rel,
        index_layout.HEADER_SIZE + wrong_head * index_layout.SLOT_SIZE,
        lambda i: (
            f"hash slot {wrong_head[i]} points at entry {head[wrong_head[i]]}, whose key hash "
            f"belongs to slot {slot_of[head[wrong_head[i]]]}"
        ),
    )
    numbers = np.arange(count, dtype=np.int64)
    broken = (prev < 0) | (prev >= numbers)
    broken[0] = False  # entry 0 is never used: whatever it holds links nowhere
    prev = np.where(numbers == 0, 0, prev)
    where = np.flatnonzero(broken)
    damage.add_each(
        "index_chain",
        rel,
        entries_at + where * index_layout.ENTRY_SIZE,
        lambda i: (
            f"prevIndex {prev[where[i]]} of entry {where[i]} "
            + (
                f"points past indexCount {count}"
                if prev[where[i]] >= count
                else "is negative"
                if prev[where[i]] < 0
                else "is not below the entry's own number (chains must strictly decrease)"
            )
            + "; the older entries of its chain are unreachable"
        ),
    )
    link = np.where(broken, 0, prev)
    cross = np.flatnonzero((link > 0) & (slot_of >= 0) & (slot_of[link] != slot_of))
    damage.add_each(
        "index_chain",
        rel,
        entries_at + cross * index_layout.ENTRY_SIZE,
        lambda i: (
            f"prevIndex {link[cross[i]]} of entry {cross[i]} (slot {slot_of[cross[i]]}) links to an "
            f"entry of slot {slot_of[link[cross[i]]]}"
        ),
    )
    reached, cut = _walk_chains(heads, key_hash, prev, slots)
    # an entry left behind a damaged link is explained by that link's damage, reported above
    lost = (~reached) & (slot_of >= 0) & (numbers > 0)
    lost &= ~cut[np.maximum(slot_of, 0)]
    where = np.flatnonzero(lost)
    damage.add_each(
        "index_chain",
        rel,
        entries_at + where * index_layout.ENTRY_SIZE,
        lambda i: (
            f"entry {where[i]} (keyHash {key_hash[where[i]]}) is not reachable from the chain of its "
            f"hash slot {slot_of[where[i]]}: key queries cannot find it"
        ),
    )


@numba.njit(cache=True, nogil=True)
def _walk_chains(
    heads: I64, key_hash: I32, prev: I32, slots: int
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """(entries reached from their slot, slots whose walk stopped at a damaged link or head).

    A walk stops at a link that does not strictly decrease, at an entry of another slot and at an
    entry already reached: each entry is visited once, whatever the file holds."""
    count = len(key_hash)
    reached = np.zeros(count, dtype=np.bool_)
    cut = np.zeros(slots, dtype=np.bool_)
    for s in range(slots):
        cur = heads[s]
        if cur == 0:
            continue
        if cur < 0 or cur >= count:
            cut[s] = True
            continue
        while cur > 0:
            kh = key_hash[cur]
            if reached[cur] or kh < 0 or kh % slots != s:
                cut[s] = True
                break
            reached[cur] = True
            p = prev[cur]
            if p < 0 or p >= cur:
                cut[s] = True
                break
            cur = p
    return reached, cut


# --- commitlog ------------------------------------------------------------------------------
@dataclass
class _Segment:
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


def _check_commitlog(
    paths: StoreLayout,
    cfg: StoreConfig,
    check_crc: bool,
    checker: _PointerCheck,
    damage: _DamageLog,
    tick: Progress,
) -> tuple[int, tuple[int, int]]:
    seg_size = cfg.commitlog_segment_size
    segments = _commitlog_segments(paths, cfg, damage)
    tick("commitlog", 0, len(segments))
    for i, seg in enumerate(segments):
        _check_missing_segment(paths, segments, i, seg_size, damage)
        _check_segment(seg, seg_size, check_crc, checker, damage, being_written=i >= len(segments) - 2)
        tick("commitlog", i + 1, len(segments))
    return _finish_commitlog(segments, seg_size, check_crc, checker, damage)


def _commitlog_segments(paths: StoreLayout, cfg: StoreConfig, damage: _DamageLog) -> list[_Segment]:
    """The segments to scan, by offset; stray and misnamed files are reported."""
    seg_size = cfg.commitlog_segment_size
    files, strays = _named_files(paths, paths.commitlog, damage)
    for p in strays:
        damage.add("file_name", _rel(paths, p), 0, "not a commitlog segment (20-digit offset name)")
    segments: list[_Segment] = []
    for start, path in files:
        if start % seg_size:
            damage.add(
                "file_name",
                _rel(paths, path),
                start,
                f"not a multiple of the segment size {seg_size}; not read",
            )
        else:
            segments.append(_Segment(start, path, _rel(paths, path)))
    return segments


def _check_missing_segment(
    paths: StoreLayout, segments: list[_Segment], i: int, seg_size: int, damage: _DamageLog
) -> None:
    """Segment ``i`` must follow segment ``i - 1`` directly."""
    seg = segments[i]
    if i and seg.start != segments[i - 1].start + seg_size:
        missing = segments[i - 1].start + seg_size
        damage.add(
            "missing_file",
            _rel(paths, paths.commitlog / segment_name(missing)),
            missing,
            f"commitlog segments missing from offset {missing} to {seg.start}",
        )


def _check_segment(
    seg: _Segment,
    seg_size: int,
    check_crc: bool,
    checker: _PointerCheck,
    damage: _DamageLog,
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


def _finish_commitlog(
    segments: list[_Segment], seg_size: int, check_crc: bool, checker: _PointerCheck, damage: _DamageLog
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


def _log_end(segments: list[_Segment], last: int, seg_size: int, min_offset: int) -> int:
    """Where the valid data ends: past the last valid record of the last segment holding data,
    or at the start of the next segment when a BLANK record closes it (as recovery counts)."""
    if last < 0:
        return min_offset
    tail = segments[last]
    following = last + 1 < len(segments) and segments[last + 1].start == tail.start + seg_size
    return tail.start + seg_size if tail.ending == "blank" and following else tail.start + tail.valid_end


def _scan_segment(
    view: memoryview,
    seg: _Segment,
    seg_size: int,
    check_crc: bool,
    damage: _DamageLog,
    *,
    being_written: bool,
) -> tuple[I64, list[tuple[int, int]]]:
    """Walk one segment's records: (their starts, the spans that could not be parsed).

    In a segment that may be ``being_written``, an invalid record with nothing record-like after
    it, or zero fill with data after it, may be a record a writer is copying in right now: the
    walk looks again from there (a few times at most) before it reports anything."""
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
            resume = _resync(view, at + 1, limit, seg.start)
            if resume < 0 and retries:
                retries, pos = retries - 1, at
                continue
            reason = ext.error.reason if ext.error is not None else "invalid record"
            damage.add("commitlog_record", seg.rel, seg.start + at, reason)
        else:  # zero fill, or fewer than 8 bytes left
            data_at = _first_nonzero(view, at, limit)
            if data_at < 0:
                seg.ending, seg.zero_at = "zeros", at
                break
            if retries:
                retries, pos = retries - 1, at
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


def _closed_since(seg: _Segment, seg_size: int, check_crc: bool) -> bool:
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
        return int(_find_record_start(u8, start, limit, seg_start))
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


# --- pointers into the commitlog ------------------------------------------------------------
_AT_RECORD: Final = 0
_UNPARSED: Final = 1
_NO_RECORD: Final = 2
_INSIDE: Final = 3

_Q_OK: Final = 0
_Q_SIZE: Final = 1
_Q_TOPIC: Final = 2
_Q_QUEUE_ID: Final = 3
_Q_QUEUE_OFFSET: Final = 4
_Q_TAGS: Final = 5
_Q_DELIVERY: Final = 6
_Q_DECODE: Final = 7  # tags that are not strict UTF-8: hashed in Python

_K_MATCH: Final = 0
_K_NONE: Final = 1
_K_DECODE: Final = 2


class _PointerCheck:
    """Checks the consume-queue and index refs pointing into each segment, as it is scanned."""

    def __init__(
        self,
        queues: _Queues,
        queue_refs: _Refs,
        index_files: list[str],
        index_refs: _Refs,
        damage: _DamageLog,
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
        self, view: memoryview, seg: _Segment, seg_size: int, starts: I64, unparsed: list[tuple[int, int]]
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

    def _check_keys_indexed(self, view: memoryview, seg: _Segment, seg_size: int, keys: _SegmentKeys) -> None:
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

    def _file(self, refs: _Refs, i: int) -> str:
        names = self.queues.files if refs is self.queue_refs else self.index_files
        return names[int(refs["file"][i])]

    def _report(self, refs: _Refs, i: int, what: str) -> None:
        kind = "consume_queue_entry" if refs is self.queue_refs else "index_entry"
        self.damage.add(kind, self._file(refs, i), int(refs["pos"][i]), what)

    def _check_queue_refs(self, view: memoryview, seg: _Segment, rel: I64, idx: I64) -> None:
        r = self.queue_refs
        u8 = np.frombuffer(view, dtype=np.uint8)
        try:
            verdict = _check_queue_kernel(
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
        for j in np.flatnonzero(verdict != _Q_OK).tolist():
            i, pos, v = int(idx[j]), int(rel[j]), int(verdict[j])
            if v != _Q_DECODE and not self.damage.wants(self._file(r, i)):
                self._report(r, i, "")  # counted, not listed: no need to decode the record
                continue
            rec = decode_record(view, pos)
            queue = int(r["queue"][i])
            tags = int(r["tags"][i])
            code = tags_code(decode_properties(rec.properties).get(PROPERTY_TAGS))
            if v == _Q_DECODE:
                if self.schedule[queue] and (tags > rec.store_timestamp or tags == code):
                    continue
                if not self.schedule[queue] and tags == code:
                    continue
                v = _Q_DELIVERY if self.schedule[queue] else _Q_TAGS
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
        self, view: memoryview, seg: _Segment, rel: I64, idx: I64, keys: _SegmentKeys
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
    """The keys dispatch indexes for each record of a segment (``_record_keys_kernel``), as
    ``(position << 32) | keyHash`` pairs: what the index entries into the segment are checked
    against, and what they must all be found among."""

    def __init__(self, view: memoryview, starts: I64) -> None:
        u8 = np.frombuffer(view, dtype=np.uint8)
        try:
            self.record, hashes, self.slow, self.rollback = _record_keys_kernel(u8, starts)
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
    return keys + [k for k in props.get(PROPERTY_KEYS, "").split(" ") if k]


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
    if verdict == _Q_SIZE:
        return f"size {size}, but the record at commitlog offset {phy} is {rec.total_size} bytes"
    if verdict == _Q_TOPIC:
        return f"the record at commitlog offset {phy} is of topic {rec.topic!r}, not {topic!r}"
    if verdict == _Q_QUEUE_ID:
        return f"the record at commitlog offset {phy} is of queue {rec.queue_id}, not {queue_id}"
    if verdict == _Q_QUEUE_OFFSET:
        return (
            f"entry of queue offset {qo}, but the record at commitlog offset {phy} has queue offset "
            f"{rec.queue_offset}"
        )
    if verdict == _Q_DELIVERY:
        return (
            f"tagsCode {tags} (delivery time) is not after the store time {rec.store_timestamp} of the "
            f"record at commitlog offset {phy}"
        )
    return f"tagsCode {tags}, but the tags of the record at commitlog offset {phy} hash to {code}"


def _locate(rel: I64, starts: I64, unparsed: list[tuple[int, int]], seg: _Segment) -> npt.NDArray[np.int8]:
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


def _misplaced(view: memoryview, seg: _Segment, starts: I64, rel: int, where: int) -> str:
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
        total = _TOTAL_SIZE.unpack_from(view, before)[0]
        if rel < before + total:
            return (
                f"commitlog offset {phy} is inside the record at {seg.start + before} ({total} bytes), "
                "not at its start"
            )
    return f"commitlog offset {phy} is not the start of a record"


# --- compiled kernels -----------------------------------------------------------------------
# Field positions of the MESSAGE record (layout drawn in codec.commitlog_record). Only records
# that scan_extent validated reach these kernels, so every length they read is within bounds.
_QUEUEID_AT: Final = 12
_QUEUEOFFSET_AT: Final = 20
_MASK32: Final = 0xFFFFFFFF
assert struct.pack(">ii", MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2) == b"\xda\xa3\x20\xa7\xda\xa3\x20\xab"
_TAGS_NAME: Final = np.frombuffer(PROPERTY_TAGS.encode(), dtype=np.uint8)
_KEYS_NAME: Final = np.frombuffer(PROPERTY_KEYS.encode(), dtype=np.uint8)
_UNIQ_NAME: Final = np.frombuffer(PROPERTY_UNIQ_KEY.encode(), dtype=np.uint8)


@numba.njit(cache=True, nogil=True)
def _check_queue_kernel(
    u8: npt.NDArray[np.uint8],
    pos: I64,
    size: I64,
    tags: I64,
    qo: I64,
    queue: I64,
    topic_bytes: npt.NDArray[np.uint8],
    topic_offsets: I64,
    queue_ids: I64,
    schedule: npt.NDArray[np.bool_],
) -> npt.NDArray[np.int8]:
    """A verdict (_Q_*) per consume-queue entry naming the record at ``pos[i]``."""
    out = np.zeros(len(pos), dtype=np.int8)
    for i in range(len(pos)):
        p = pos[i]
        if _be32(u8, p) != size[i]:
            out[i] = _Q_SIZE
            continue
        topic_at, topic_len, props_at, props_len, store_ts = _layout(u8, p)
        q = queue[i]
        a, b = topic_offsets[q], topic_offsets[q + 1]
        same = topic_len == b - a
        j = 0
        while same and j < topic_len:
            same = u8[topic_at + j] == topic_bytes[a + j]
            j += 1
        if not same:
            out[i] = _Q_TOPIC
            continue
        if _be32(u8, p + _QUEUEID_AT) != queue_ids[q]:
            out[i] = _Q_QUEUE_ID
            continue
        if _be64(u8, p + _QUEUEOFFSET_AT) != qo[i]:
            out[i] = _Q_QUEUE_OFFSET
            continue
        code = 0
        vs, ve = _property(u8, props_at, props_at + props_len, _TAGS_NAME)
        if vs >= 0:
            h, ok = _hash_utf8(u8, vs, ve, 0)
            if not ok:
                out[i] = _Q_DECODE
                continue
            code = _signed32(h)
        if schedule[q]:
            if not (tags[i] > store_ts or tags[i] == code):
                out[i] = _Q_DELIVERY
        elif tags[i] != code:
            out[i] = _Q_TAGS
    return out


_TX_MASK: Final = 0xC
_TX_ROLLBACK: Final = 0xC
_SYSFLAG_AT: Final = 36


@numba.njit(cache=True, nogil=True)
def _grow(a: I64, k: int) -> I64:
    if k < len(a):
        return a
    b = np.empty(2 * len(a), dtype=np.int64)
    b[:k] = a[:k]
    return b


@numba.njit(cache=True, nogil=True)
def _record_keys_kernel(
    u8: npt.NDArray[np.uint8], pos: I64
) -> tuple[I64, I64, npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """The keys dispatch indexes for each record at ``pos`` (UNIQ_KEY, each KEYS word), as
    (record number, keyHash) pairs; which records hold keys that are not strict UTF-8 (their
    pairs are left out: Python hashes them); which are ROLLBACK records (RocketMQ does not index
    them, rocketstore does)."""
    n = len(pos)
    rec = np.empty(2 * n + 16, dtype=np.int64)
    out = np.empty(2 * n + 16, dtype=np.int64)
    slow = np.zeros(n, dtype=np.bool_)
    rollback = np.zeros(n, dtype=np.bool_)
    k = 0
    for i in range(n):
        p = pos[i]
        rollback[i] = _be32(u8, p + _SYSFLAG_AT) & _TX_MASK == _TX_ROLLBACK
        first = k
        topic_at, topic_len, props_at, props_len, _ = _layout(u8, p)
        props_end = props_at + props_len
        prefix, ok = _hash_utf8(u8, topic_at, topic_at + topic_len, 0)
        prefix = (prefix * 31 + 35) & _MASK32  # '#'
        vs, ve = _property(u8, props_at, props_end, _UNIQ_NAME)
        if vs >= 0 and ok:
            h, ok = _hash_utf8(u8, vs, ve, prefix)
            rec, out = _grow(rec, k), _grow(out, k)
            rec[k], out[k] = i, _index_hash(h)
            k += 1
        ks, ke = _property(u8, props_at, props_end, _KEYS_NAME)
        j = ks
        while ok and 0 <= j < ke:
            t = j
            while t < ke and u8[t] != 0x20:
                t += 1
            if t > j:
                h, ok = _hash_utf8(u8, j, t, prefix)
                rec, out = _grow(rec, k), _grow(out, k)
                rec[k], out[k] = i, _index_hash(h)
                k += 1
            j = t + 1
        if not ok:
            slow[i] = True
            k = first
    return rec[:k].copy(), out[:k].copy(), slow, rollback


# --- checkpoint -----------------------------------------------------------------------------
def _check_config_dir(paths: StoreLayout, damage: _DamageLog) -> None:
    """Its JSON tables are not checked here, but it must be a directory a store can open."""
    _entries(paths, paths.config, damage)


def _check_checkpoint(paths: StoreLayout, damage: _DamageLog) -> None:
    """Only the size: RocketMQ tolerates any times in it (zero ones included)."""
    try:
        if not store_file_exists(paths.checkpoint):
            return  # created at the next open
        size = os.lstat(paths.checkpoint).st_size
    except StorePathError as exc:
        _wrong_kind(paths, paths.checkpoint, exc.found, exc.expected, damage)
        return
    except FileNotFoundError:
        return
    if size != CHECKPOINT_FILE_SIZE:
        damage.add(
            "file_size",
            "checkpoint",
            min(size, CHECKPOINT_FILE_SIZE),
            f"{size} bytes, expected {CHECKPOINT_FILE_SIZE}",
        )
