"""Consumer offsets (``config/consumerOffset.json``): where each group is in each queue.

Commits go to memory; the table is written every ``flush_consumer_offset_interval`` ms by
``OffsetFlushService`` and at close, atomically (new file, fsync, rename), so a crash leaves the
previous table or the new one, never half of one. A crash loses at most the commits of the last
interval: consumers then re-read a few messages (at-least-once, as with RocketMQ).

Other processes (consumers in followers, ``rocketstore reset-offset``) change the file too: a
persist merges, under the file's lock, only the offsets committed here since the last one into
what is on disk (``consumer.offset_store``), and the table is read again whenever the file was
replaced, so ``query`` and ``table`` see every process's commits.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path

from rocketstore.consumer.offset_store import QueueKey, commit_offsets, decode_offsets_file, read_offsets
from rocketstore.errors import CorruptDataError, InvalidArgumentError, StoreConfigError
from rocketstore.limits import MAX_OFFSET, MAX_QUEUE_ID
from rocketstore.message import TOPIC_PATTERN
from rocketstore.service import BackgroundService, FailureHandler
from rocketstore.storage.paths import DEFAULT_FILE_MODE, read_store_text

__all__ = ["GROUP_PATTERN", "ConsumerOffsets", "OffsetFlushService"]

log = logging.getLogger(__name__)
GROUP_PATTERN = re.compile(r"[%|A-Za-z0-9_-]{1,255}")
# a queue offset is a Java long (RocketMQ's readers, the file's loader, take no more)


class ConsumerOffsets:
    def __init__(self, path: Path, *, readonly: bool = False, mode: int = DEFAULT_FILE_MODE) -> None:
        self.path = path
        self._mode = mode
        self._readonly = readonly
        self._lock = threading.Lock()
        self._table: dict[tuple[str, str], dict[int, int]] = {}
        self._dirty: dict[QueueKey, int] = {}  # committed here since the last persist
        self._file_id: tuple[int, int, int] | None = None  # the file's (inode, mtime, size) as read

    def load(self) -> None:
        text = read_store_text(self.path)
        if text is not None:
            self._file_id = self._stat()
            self._table = decode_offsets_file(text, self.path)[0]

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _reload_if_replaced(self) -> None:
        """Adopt what other processes committed (offsets committed here and not yet written stay)."""
        file_id = self._stat()
        if file_id == self._file_id or file_id is None:
            return
        try:
            table = read_offsets(self.path)
        except (OSError, CorruptDataError) as exc:
            log.warning("%s: not re-read (%s); keeping the table read before", self.path, exc)
            return
        with self._lock:
            self._file_id = file_id
            for (topic, group, queue_id), offset in self._dirty.items():
                table.setdefault((topic, group), {})[queue_id] = offset
            self._table = table

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if self._readonly:
            raise StoreConfigError("the store is open read-only: offsets cannot be committed")
        if not isinstance(group, str) or not GROUP_PATTERN.fullmatch(group):
            raise StoreConfigError(
                f"consumer group {group!r}: want 1-255 letters, digits, '_', '-', '%' or '|'"
            )
        if not isinstance(topic, str) or not TOPIC_PATTERN.fullmatch(topic):
            raise StoreConfigError(f"topic {topic!r}: not a valid topic name")
        if not 0 <= queue_id <= MAX_QUEUE_ID:
            raise InvalidArgumentError(f"queue_id must be in 0..{MAX_QUEUE_ID}, not {queue_id}")
        if not 0 <= offset <= MAX_OFFSET:
            raise InvalidArgumentError(f"offset must be in 0..2^63-1, not {offset}")
        with self._lock:
            self._table.setdefault((topic, group), {})[queue_id] = offset
            self._dirty[(topic, group, queue_id)] = offset

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for this queue."""
        self._reload_if_replaced()
        return self._table.get((topic, group), {}).get(queue_id, -1)

    def table(self) -> dict[tuple[str, str], dict[int, int]]:
        self._reload_if_replaced()
        with self._lock:
            return {k: dict(v) for k, v in self._table.items()}

    def persist(self) -> bool:
        """Merge what was committed here since the last persist into the file; True if there was
        anything. Raises OSError."""
        with self._lock:
            if not self._dirty or self._readonly:
                return False
            changes, self._dirty = self._dirty, {}
        try:
            table = commit_offsets(self.path, changes, forced=changes, mode=self._mode)
        except BaseException:
            with self._lock:
                self._dirty = {**changes, **self._dirty}
            raise
        with self._lock:
            for (topic, group, queue_id), offset in self._dirty.items():
                table.setdefault((topic, group), {})[queue_id] = offset
            self._table = table
            self._file_id = self._stat()
        return True


class OffsetFlushService(BackgroundService):
    def __init__(self, offsets: ConsumerOffsets, interval_ms: int, on_failure: FailureHandler | None = None):
        super().__init__("flush-consumer-offsets", interval_ms / 1000, on_failure)
        self._offsets = offsets

    def run_once(self) -> None:
        self._offsets.persist()
