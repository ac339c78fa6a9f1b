"""Consumer offsets (``config/consumerOffset.json``): where each group is in each queue.

Commits go to memory; the table is written every ``flush_consumer_offset_interval`` ms by
``OffsetFlushService`` and at close, atomically (new file, fsync, rename), so a crash leaves the
previous table or the new one, never half of one. A crash loses at most the commits of the last
interval: consumers then re-read a few messages (at-least-once, as with RocketMQ).
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from rocketstore.codec.config_json import decode_offsets, encode_offsets
from rocketstore.errors import StoreConfigError
from rocketstore.message import TOPIC_PATTERN
from rocketstore.service import BackgroundService, FailureHandler
from rocketstore.storage.paths import DEFAULT_FILE_MODE, atomic_write, read_store_text

__all__ = ["GROUP_PATTERN", "ConsumerOffsets", "OffsetFlushService"]

GROUP_PATTERN = re.compile(r"[%|A-Za-z0-9_-]{1,255}")


class ConsumerOffsets:
    def __init__(self, path: Path, *, readonly: bool = False, mode: int = DEFAULT_FILE_MODE) -> None:
        self.path = path
        self._mode = mode
        self._readonly = readonly
        self._lock = threading.Lock()
        self._table: dict[tuple[str, str], dict[int, int]] = {}
        self._dirty = False

    def load(self) -> None:
        text = read_store_text(self.path)
        if text is not None:
            self._table = decode_offsets(text, str(self.path))

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if self._readonly:
            raise StoreConfigError("the store is open read-only: offsets cannot be committed")
        if not isinstance(group, str) or not GROUP_PATTERN.fullmatch(group):
            raise StoreConfigError(
                f"consumer group {group!r}: want 1-255 letters, digits, '_', '-', '%' or '|'"
            )
        if not isinstance(topic, str) or not TOPIC_PATTERN.fullmatch(topic):
            raise StoreConfigError(f"topic {topic!r}: not a valid topic name")
        if offset < 0 or queue_id < 0:
            raise StoreConfigError(f"offset and queue id must be >= 0, got queue {queue_id} offset {offset}")
        with self._lock:
            self._table.setdefault((topic, group), {})[queue_id] = offset
            self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for this queue."""
        return self._table.get((topic, group), {}).get(queue_id, -1)

    def table(self) -> dict[tuple[str, str], dict[int, int]]:
        with self._lock:
            return {k: dict(v) for k, v in self._table.items()}

    def persist(self) -> bool:
        """Write the table if it changed; True if written. Raises OSError."""
        with self._lock:
            if not self._dirty or self._readonly:
                return False
            data = encode_offsets(self._table)
            self._dirty = False
        try:
            atomic_write(self.path, data, self._mode)
        except BaseException:
            self._dirty = True
            raise
        return True


class OffsetFlushService(BackgroundService):
    def __init__(self, offsets: ConsumerOffsets, interval_ms: int, on_failure: FailureHandler | None = None):
        super().__init__("flush-consumer-offsets", interval_ms / 1000, on_failure)
        self._offsets = offsets

    def run_once(self) -> None:
        self._offsets.persist()
