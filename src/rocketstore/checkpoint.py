"""StoreCheckpoint: the ``checkpoint`` file (layout in ``codec.checkpoint``)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from rocketstore.codec.checkpoint import (
    CHECKPOINT_FILE_SIZE,
    Checkpoint,
    decode_checkpoint,
    encode_checkpoint,
)
from rocketstore.storage.paths import DEFAULT_FILE_MODE, atomic_write, read_store_file

__all__ = ["StoreCheckpoint"]

log = logging.getLogger(__name__)


class StoreCheckpoint:
    """The three timestamps recovery starts from, updated by the flushers.

    Each write replaces the whole file atomically (temp file, fsync, rename), so a crash
    leaves either the previous or the new checkpoint. Thread-safe.
    """

    def __init__(self, path: Path, *, readonly: bool = False, mode: int = DEFAULT_FILE_MODE) -> None:
        self.path = path
        self.readonly = readonly
        self.mode = mode
        self._lock = threading.Lock()
        self.value = Checkpoint()
        # What was wrong with the file, when it could not be read: then it is ignored (all three
        # times 0), which makes a recovery after a crash scan the whole log and re-index it, and
        # the next flush writes it whole again
        self.damage: str | None = None
        data = read_store_file(path)
        if data is not None:
            if len(data) != CHECKPOINT_FILE_SIZE:
                self.damage = (
                    f"{path} ({len(data)} bytes, not {CHECKPOINT_FILE_SIZE}): ignored, its times "
                    "taken as 0 (a recovery after a crash scans the whole log)"
                )
                log.warning("checkpoint %s", self.damage)
            else:
                self.value = decode_checkpoint(data)

    def update(
        self, *, physic: int | None = None, logics: int | None = None, index: int | None = None
    ) -> None:
        with self._lock:
            v = self.value
            self.value = Checkpoint(
                v.physic_msg_timestamp if physic is None else max(physic, v.physic_msg_timestamp),
                v.logics_msg_timestamp if logics is None else max(logics, v.logics_msg_timestamp),
                v.index_msg_timestamp if index is None else max(index, v.index_msg_timestamp),
            )

    def flush(self) -> None:
        """Write the file durably. Raises OSError on failure."""
        if self.readonly:
            return
        with self._lock:
            atomic_write(self.path, encode_checkpoint(self.value), self.mode)

    def min_timestamp(self, *, include_index: bool) -> int:
        """RocketMQ's getMinTimestamp(Index): the earliest of the timestamps, less 3 s of margin."""
        v = self.value
        ts = min(v.physic_msg_timestamp, v.logics_msg_timestamp)
        if include_index:
            ts = min(ts, v.index_msg_timestamp)
        return max(ts - 3000, 0)
