"""Committed offsets shared by every process of a store: ``config/consumerOffset.json``.

The file keeps RocketMQ's shape (``codec.config_json``). Any process may change it — the writer's
``ConsumerOffsets`` at its periodic persist, a consumer in a follower process at its commit,
``rocketstore reset-offset`` — and none loses another's update:

1. take an exclusive ``flock`` on ``config/consumerOffset.json.lock`` (a side file: the table
   itself is replaced, so a lock on it would be on the old inode);
2. read the table as it is on disk now;
3. merge in this process's changes: a plain commit keeps the larger of the two offsets (a
   consumer that lost a queue to another member cannot move it back), a forced one (a seek, a
   reset, the writer's ``commit_offset``) sets its value;
4. replace the file atomically (temp file, fsync, rename: ``storage.paths.atomic_write``) and
   release the lock.

Readers take no lock: the file is always whole, the old table or the new one.

A bad entry (an offset or queue id out of range, of another type, a key without ``@``) does
not make the file unreadable: it is left out, with one warning line per read, and the next
write leaves it out of the file. A client can never brick the store with an offset.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from rocketstore.codec.config_json import bad_entries_text, decode_offsets, encode_offsets
from rocketstore.storage.paths import DEFAULT_FILE_MODE, atomic_write, open_store_file, read_store_text

__all__ = ["OffsetTable", "QueueKey", "commit_offsets", "decode_offsets_file", "read_offsets"]

log = logging.getLogger(__name__)

QueueKey = tuple[str, str, int]  # topic, group, queue id
OffsetTable = dict[tuple[str, str], dict[int, int]]  # (topic, group) -> {queue id: offset}


def read_offsets(path: Path) -> OffsetTable:
    """The table as on disk now (empty when there is no file), bad entries left out (logged)."""
    return _read(path)[0]


def decode_offsets_file(text: str, path: Path) -> tuple[OffsetTable, int]:
    """The table ``text`` (the file at ``path``) holds, and how many bad entries were left out:
    one warning line names them. CorruptDataError only when the file as a whole is not an
    offsets table (not JSON, no ``offsetTable`` object)."""
    skipped: list[str] = []
    table = decode_offsets(text, str(path), skipped)
    if skipped:
        log.warning("%s", bad_entries_text(str(path), skipped))
    return table, len(skipped)


def _read(path: Path) -> tuple[OffsetTable, int]:
    text = read_store_text(path)
    return decode_offsets_file(text, path) if text is not None else ({}, 0)


@contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    fd = open_store_file(path.with_name(path.name + ".lock"), writable=True, create_mode=mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def commit_offsets(
    path: Path,
    changes: Mapping[QueueKey, int],
    forced: Iterable[QueueKey] = (),
    mode: int = DEFAULT_FILE_MODE,
) -> OffsetTable:
    """Merge ``changes`` into the file under its lock (see the module docstring); returns the
    table as written. Raises OSError when the file cannot be written."""
    must_set = set(forced)
    with _locked(path, mode):
        table, skipped = _read(path)
        changed = skipped > 0  # rewritten without the bad entries
        for key, offset in changes.items():
            topic, group, queue_id = key
            queues = table.setdefault((topic, group), {})
            old = queues.get(queue_id)
            new = offset if key in must_set or old is None else max(old, offset)
            if new != old:
                queues[queue_id] = new
                changed = True
        if changed:
            atomic_write(path, encode_offsets(table), mode)
    return table
