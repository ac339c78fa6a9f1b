"""The store's ``lock`` file: one process, one open store.

The lock is a POSIX record lock on byte 0 (``fcntl.lockf``), the same lock Java's
``FileChannel.tryLock(0, 1, false)`` takes, so rocketstore and a RocketMQ broker exclude each
other. POSIX locks do not exclude opens within one process, so a process-wide registry
refuses a second open of the same directory here.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
from pathlib import Path

from rocketstore.errors import RocketStoreError, StoreLockedError
from rocketstore.storage.paths import DEFAULT_FILE_MODE, open_store_file

__all__ = ["StoreLock", "lock_holder"]

_held: set[str] = set()
_held_lock = threading.Lock()


class StoreLock:
    def __init__(self, path: Path, *, mode: int = DEFAULT_FILE_MODE) -> None:
        self.path = path
        self._mode = mode
        self._key = os.path.realpath(path)
        self._fd: int | None = None

    def acquire(self) -> None:
        with _held_lock:
            if self._key in _held:
                raise StoreLockedError(str(self.path.parent), "it is already open in this process")
            fd = open_store_file(self.path, writable=True, create_mode=self._mode)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError:
                holder = _holder_pid(fd)
                os.close(fd)
                who = f"process {holder} holds {self.path}" if holder else f"{self.path} is locked"
                raise StoreLockedError(str(self.path.parent), who) from None
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


_FLOCK = struct.Struct("hhqqi4x")  # Linux x86-64/arm64 struct flock: type, whence, start, len, pid


def _holder_pid(fd: int) -> int | None:
    """The process holding the lock on byte 0 (F_GETLK), or None when the platform won't say."""
    try:
        probe = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        l_type, _, _, _, pid = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, probe))
    except (OSError, struct.error):
        return None
    return pid if l_type != fcntl.F_UNLCK and pid > 0 else None


def lock_holder(path: Path) -> int | None:
    """The process holding the store lock at ``path`` (this one included), or None: asked
    without taking it, through a read-only descriptor."""
    with _held_lock:
        if os.path.realpath(path) in _held:
            return os.getpid()
    try:
        fd = open_store_file(path)
    except (OSError, RocketStoreError):  # no lock file, or not one: no holder to name
        return None
    try:
        return _holder_pid(fd)
    finally:
        os.close(fd)
