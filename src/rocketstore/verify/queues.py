"""Checking the consume queues: ``consumequeue/{topic}/{queueId}/{file}``, entries decoded by
``codec.consume_queue_entry``.

- file size = consume_queue_entries * 20, name = its first byte (a multiple of the size), files
  contiguous                                                     file_size, file_name, missing_file
- a queue's entries run up to its first all-zero entry (unwritten space); a non-zero entry after
  zero entries marks a hole (recovery rebuilds it)                consume_queue_entry
- leading fillPreBlank entries of the first file are skipped; every other entry has offset >= 0
  and size > 0                                                    consume_queue_entry

The valid entries are gathered as ``Refs`` (column ``qo`` is the entry's queue offset: entry i of
file F is F.start // 20 + i) for ``pointers.PointerCheck`` to match against their records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rocketstore.codec.consume_queue_entry import CQ_ENTRY_SIZE, PRE_BLANK_ENTRY, decode_entries, decode_entry
from rocketstore.config import StoreConfig
from rocketstore.message import SCHEDULE_TOPIC
from rocketstore.storage.file_view import mapped_readonly
from rocketstore.storage.paths import StoreLayout, parse_queue_id, segment_name
from rocketstore.verify.listing import list_entries, named_files, store_relative, wrong_kind
from rocketstore.verify.refs import I64, Refs
from rocketstore.verify.report import DamageLog, Progress

__all__ = ["FoundQueue", "Queues", "find_queues", "new_queue_refs", "read_consume_queues", "read_queue"]

_PRE_BLANK_OFFSET, _PRE_BLANK_SIZE, _PRE_BLANK_TAGS = decode_entry(PRE_BLANK_ENTRY)  # fillPreBlank padding


@dataclass
class Queues:
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


def new_queue_refs() -> Refs:
    """The columns gathered per consume-queue entry: commitlog offset, size, tagsCode, queue
    offset, queue number, file number, byte position in the file."""
    return Refs(
        phy=np.int64, size=np.int64, tags=np.int64, qo=np.int64, queue=np.int32, file=np.int32, pos=np.int64
    )


def read_consume_queues(
    paths: StoreLayout, cfg: StoreConfig, queues: Queues, refs: Refs, damage: DamageLog, tick: Progress
) -> int:
    """Check each queue's files on their own and gather their entries as refs; returns how many
    entries were checked."""
    found = find_queues(paths, damage)
    total = sum(len(files) for *_, files in found)
    done = checked = 0
    tick("consumequeue", 0, total)
    for topic, queue_id, queue_dir, files in found:
        queues.topics.append(topic)
        queues.queue_ids.append(queue_id)
        checked += read_queue(paths, cfg, queue_dir, files, len(queues.topics) - 1, queues, refs, damage)
        done += len(files)
        tick("consumequeue", done, total)
    refs.seal()
    return checked


FoundQueue = tuple[str, int, Path, list[tuple[int, Path]]]  # topic, queue id, directory, files by offset


def find_queues(paths: StoreLayout, damage: DamageLog) -> list[FoundQueue]:
    """Every queue directory ``{topic}/{queueId}`` and its files; anything else is reported."""
    found: list[FoundQueue] = []
    root = paths.consume_queue
    for topic_dir in list_entries(paths, root, damage):
        if not topic_dir.is_dir:
            wrong_kind(paths, topic_dir.path, topic_dir.kind, "a topic directory", damage)
            continue
        for queue_dir in list_entries(paths, topic_dir.path, damage):
            queue_id = parse_queue_id(queue_dir.name)
            if queue_id is None:
                damage.add(
                    "file_name",
                    store_relative(paths, queue_dir.path),
                    0,
                    "not a queue directory (a queue id)",
                )
            elif not queue_dir.is_dir:
                wrong_kind(paths, queue_dir.path, queue_dir.kind, "a queue directory", damage)
            else:
                files, strays = named_files(paths, queue_dir.path, damage)
                for p in strays:
                    damage.add(
                        "file_name", store_relative(paths, p), 0, "not a consume-queue file (20-digit name)"
                    )
                found.append((topic_dir.name, queue_id, queue_dir.path, files))
    return found


def read_queue(
    paths: StoreLayout,
    cfg: StoreConfig,
    queue_dir: Path,
    files: list[tuple[int, Path]],
    queue: int,
    queues: Queues,
    refs: Refs,
    damage: DamageLog,
) -> int:
    """One queue's files in order: names, sizes, contiguity, then each file's entries."""
    file_size = cfg.consume_queue_entries * CQ_ENTRY_SIZE
    checked = 0
    expect: int | None = None
    after_zero = False  # the last entry read was unwritten (all zero)
    for k, (start, path) in enumerate(files):
        rel = store_relative(paths, path)
        if start % file_size:
            damage.add(
                "file_name", rel, 0, f"{start} is not a multiple of the file size {file_size}; not read"
            )
            continue
        if expect is not None and start != expect:
            damage.add(
                "missing_file",
                store_relative(paths, queue_dir / segment_name(expect)),
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
    return decode_entries(first[: n * CQ_ENTRY_SIZE].data)


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
    refs: Refs,
    damage: DamageLog,
) -> tuple[int, bool]:
    """Check one file's entries and gather the valid ones as refs: (entries checked, whether the
    file ends in unwritten entries)."""
    lead = 0
    if first:  # fillPreBlank padding of a queue whose first file starts past queue offset 0
        pre_blank = (off == _PRE_BLANK_OFFSET) & (size == _PRE_BLANK_SIZE) & (tags == _PRE_BLANK_TAGS)
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
