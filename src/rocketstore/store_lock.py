"""The store's ``lock`` file: one process, one open store.

The lock is a POSIX record lock on byte 0 (``fcntl.lockf``), the same lock Java's
``FileChannel.tryLock(0, 1, false)`` takes, so rocketstore and a RocketMQ broker exclude each
other. POSIX locks do not exclude opens within one process, so a process-wide registry
refuses a second open of the same directory here.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from rocketstore.errors import StoreLockedError

__all__ = ["StoreLock"]

_held: set[str] = set()
_held_lock = threading.Lock()


class StoreLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._key = os.path.realpath(path)
        self._fd: int | None = None

    def acquire(self) -> None:
        with _held_lock:
            if self._key in _held:
                raise StoreLockedError(str(self.path.parent), "it is already open in this process")
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError:
                os.close(fd)
                raise StoreLockedError(str(self.path.parent), f"{self.path} is locked") from None
            os.pwrite(fd, b"lock", 0)
            os.fsync(fd)
            _held.add(self._key)
            self._fd = fd

    def release(self) -> None:
        with _held_lock:
            if self._fd is None:
                return
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)
            finally:
                os.close(self._fd)
                self._fd = None
                _held.discard(self._key)
